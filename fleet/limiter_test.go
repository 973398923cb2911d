package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
)

// starts records when attempts started.
type starts struct {
	mu sync.Mutex
	at []time.Time
}

func (s *starts) add(t time.Time) {
	s.mu.Lock()
	s.at = append(s.at, t)
	s.mu.Unlock()
}

// mostWithin returns the most starts in any window [x, x+w).
func (s *starts) mostWithin(w time.Duration) int {
	s.mu.Lock()
	at := slices.Clone(s.at)
	s.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	most, j := 0, 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < w {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

func (s *starts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// hammer runs goroutines that call Do through lim, one attempt each, as fast
// as lim lets them, until ctx ends, and records each attempt's start.
func hammer(ctx context.Context, wg *sync.WaitGroup, lim retry.Limiter, goroutines int, rec *starts) {
	for range goroutines {
		wg.Go(func() {
			for {
				err := retry.Do(ctx, func(context.Context) error {
					rec.add(time.Now())
					return nil
				}, retry.Policy{MaxAttempts: 1, Limiter: lim})
				if ctx.Err() != nil || errors.Is(err, retry.ErrNoTimeLeft) {
					return // the run is over
				}
			}
		})
	}
}

// Four processes, each with its own Limiter and 25 goroutines that want
// every attempt they can get, share one schedule: over any second the
// attempts are at most the rate plus the burst, and the rate is used.
func TestLimiterSharesOneRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{latency: time.Millisecond}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		var rec starts
		var wg sync.WaitGroup
		for range 4 {
			hammer(ctx, &wg, newLimiter(t, store, 100, 10, nil), 25, &rec)
		}
		wg.Wait()
		assert.LessOrEqual(t, rec.mostWithin(time.Second), 100+10, "attempts in a second")
		assert.GreaterOrEqual(t, rec.count(), 5*100, "the rate is used: 5s at 100/s, and the burst")
		assert.LessOrEqual(t, rec.count(), 5*100+10)
		books, slots, _ := store.stats()
		t.Logf("%d attempts, %d slots booked in %d round trips", rec.count(), slots, books)
		assert.Less(t, books, rec.count()/3, "the schedule is booked ahead, so processes book in batches (of up to 5 slots, 50ms of the rate)")
	})
}

// A process that books at 10,000/s books in batches: few round trips, and
// still never more than the rate plus the burst.
func TestLimiterBatchesAtHighRates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{latency: 100 * time.Microsecond}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var rec starts
		var wg sync.WaitGroup
		hammer(ctx, &wg, newLimiter(t, store, 10_000, 1, nil), 100, &rec)
		wg.Wait()
		books, slots, _ := store.stats()
		t.Logf("%d attempts, %d slots booked in %d round trips", rec.count(), slots, books)
		assert.LessOrEqual(t, rec.mostWithin(time.Second), 10_000+1)
		assert.GreaterOrEqual(t, rec.count(), 9_900)
		assert.Less(t, books*20, rec.count(), "at least 20 slots per round trip")
	})
}

// Below the limit, a batch would waste most of its slots (they pass before
// the process asks for them), so the processes book one slot per round trip.
func TestLimiterBooksOneByOneBelowTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{latency: 100 * time.Microsecond}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		var rec starts
		var wg sync.WaitGroup
		for p := range 4 {
			lim := newLimiter(t, store, 1000, 10, nil)
			wg.Go(func() {
				tick := time.NewTicker(4*time.Millisecond + time.Duration(p)*100*time.Microsecond) // 4 x 250/s: half the limit
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					_ = retry.Do(ctx, func(context.Context) error { rec.add(time.Now()); return nil },
						retry.Policy{MaxAttempts: 1, Limiter: lim})
				}
			})
		}
		wg.Wait()
		_, slots, _ := store.stats()
		t.Logf("%d attempts, %d slots booked", rec.count(), slots)
		assert.LessOrEqual(t, slots, rec.count()*11/10, "few slots wasted")
	})
}

// A store that is down fails a booking at once, with a reason that says so
// and the store's own error, and no attempt starts; the store is left alone
// for a short pause (5ms to 10ms after a first failure), then asked again.
func TestLimiterFailsClosedWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{down: errStoreDown}
		var seen []error
		var mu sync.Mutex
		lim := newLimiter(t, store, 100, 1, &fleet.Options{OnStoreError: func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }})
		calls := 0
		fn := func(context.Context) error { calls++; return nil }
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
		require.Error(t, err)
		assert.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.ErrorIs(t, err, errStoreDown)
		assert.ErrorContains(t, err, "fleet: limiter store unavailable: connection refused")
		assert.Zero(t, calls, "no attempt without a slot")
		assert.Zero(t, time.Since(start))
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []error{errStoreDown}, seen, "OnStoreError saw the cause")
		mu.Unlock()

		store.set(func(s *memStore) { s.down = nil })
		err = retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
		assert.ErrorIs(t, err, fleet.ErrUnavailable, "the store is left alone for a pause")
		time.Sleep(4 * time.Millisecond)
		err = retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
		assert.ErrorIs(t, err, fleet.ErrUnavailable, "still left alone: the first pause is at least 5ms")
		books, _, _ := store.stats()
		assert.Zero(t, books)

		time.Sleep(6 * time.Millisecond)
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{Limiter: lim}), "asked again after the pause")
		assert.Equal(t, 1, calls)
	})
}

// After a store failure the Limiter asks again soon, so that a store away
// for 100ms (a restart) costs about that, and backs off while it stays
// away, to 10 to 20 times a second.
func TestLimiterProbesSoonAndBacksOff(t *testing.T) {
	t.Parallel()
	for _, outage := range []time.Duration{100 * time.Millisecond, 5 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			defer time.Sleep(time.Second) // let refunds sent in the background end
			store := &memStore{latency: 100 * time.Microsecond, down: errStoreDown}
			lim := newLimiter(t, store, 1000, 1, nil)
			start := time.Now()
			time.AfterFunc(outage, func() { store.set(func(s *memStore) { s.down = nil }) })
			var back time.Duration
			for back == 0 { // a caller that books every millisecond
				if _, err := lim.Reserve(t.Context(), time.Now()); err == nil {
					back = time.Since(start)
				}
				time.Sleep(time.Millisecond)
			}
			asks := store.asked()
			t.Logf("store away %v: bookings back after %v, %d asks", outage, back, len(asks))
			assert.GreaterOrEqual(t, back, outage)
			// The pauses are at most 10ms * 1.5^k and 100ms; the one under way
			// when the store came back decides: at most 76ms after 100ms away,
			// 100ms after a long outage.
			assert.LessOrEqual(t, back, outage+min(outage*3/4, 100*time.Millisecond)+2*time.Millisecond)
			for i := 1; i < len(asks); i++ {
				gap := asks[i].Sub(asks[i-1])
				assert.GreaterOrEqual(t, gap, 5*time.Millisecond, "ask %d: never sooner than half the first pause", i)
				assert.LessOrEqual(t, gap, 102*time.Millisecond, "ask %d: at least every 100ms while there are calls", i)
				if i > 6 {
					assert.GreaterOrEqual(t, gap, 50*time.Millisecond, "ask %d: after 6 failures, the pauses are between 50ms and 100ms", i)
				}
			}
		})
	}
}

// While a store that failed is probed, only the booking that asks waits for
// the answer: the others fail at once, so a store that hangs costs one
// booking a Timeout per probe, not every booking.
func TestLimiterOneBookingWaitsForAProbe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(5 * time.Second) // let the round trips end: a call to the store may take 4 times the Timeout
		store := &memStore{}
		lim := newLimiter(t, store, 100, 1, nil)
		warmUp(t, lim)
		store.set(func(s *memStore) { s.hang = true })
		_, err := lim.Reserve(t.Context(), time.Now())
		require.ErrorIs(t, err, fleet.ErrUnavailable, "the first failure")
		time.Sleep(10 * time.Millisecond) // the first pause is at most 10ms
		var wg sync.WaitGroup
		wg.Go(func() {
			start := time.Now()
			_, err := lim.Reserve(t.Context(), start)
			assert.ErrorIs(t, err, fleet.ErrUnavailable)
			assert.Equal(t, 100*time.Millisecond, time.Since(start), "the probe waits for its answer, up to the Timeout")
		})
		time.Sleep(time.Millisecond)
		start := time.Now()
		_, err = lim.Reserve(t.Context(), start)
		assert.ErrorContains(t, err, "no answer within 100ms")
		assert.Zero(t, time.Since(start), "another booking does not wait for the probe")
		wg.Wait()
		assert.Len(t, store.asked(), 3, "the warm-up's, the first failure's and the probe's")
	})
}

// A store that does not answer costs a booking Options.Timeout, never more,
// and never past the caller's deadline; its error is not the caller's
// deadline.
func TestLimiterTimesOutASlowStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(5 * time.Second) // let the round trips end: a call to the store may take 4 times the Timeout
		store := &memStore{hang: true}
		lim := newLimiter(t, store, 100, 1, nil)
		start := time.Now()
		_, err := lim.Reserve(t.Context(), start)
		require.Error(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the default timeout")
		assert.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.ErrorContains(t, err, "no answer within 100ms")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "not to be taken for the caller's deadline")

		lim = newLimiter(t, store, 100, 1, &fleet.Options{Timeout: time.Second})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		start = time.Now()
		err = retry.Do(ctx, func(context.Context) error { return nil }, retry.Policy{Limiter: lim})
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline came first")
		assert.NotErrorIs(t, err, fleet.ErrUnavailable)
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
	})
}

// A store that ignores its context (go-redis does by default) still costs a
// booking no more than the timeout; its late answer's slots are not lost.
func TestLimiterLateAnswerFillsThePool(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &stubborn{memStore: memStore{}, delay: 300 * time.Millisecond}
		lim := newLimiter(t, store, 1000, 1, &fleet.Options{Fallback: 0.5})
		start := time.Now()
		r, err := lim.Reserve(t.Context(), start)
		require.NoError(t, err, "the fallback served")
		assert.Equal(t, 100*time.Millisecond, time.Since(start))
		_, isSlot := r.Handle.(*rate.Reservation)
		assert.True(t, isSlot, "a booking of the local fallback")
		time.Sleep(2 * time.Second)
		books, _, _ := store.stats()
		require.Equal(t, 1, books)
		r, err = lim.Reserve(t.Context(), time.Now())
		require.NoError(t, err)
		books, _, _ = store.stats()
		assert.Equal(t, 2, books, "asked the store again after the pause")
		assert.Equal(t, time.Now(), r.Start)
	})
}

// stubborn is a memStore that answers after delay whatever its context says.
type stubborn struct {
	memStore
	delay time.Duration
}

func (s *stubborn) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	wait, mark, _, err := s.BookClocked(ctx, sc, n, after)
	return wait, mark, err
}

func (s *stubborn) BookClocked(_ context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	time.Sleep(s.delay)
	s.delay = 0 // only the first answer is late
	return s.memStore.BookClocked(context.Background(), sc, n, after)
}

// A store that honours its context and answers a little after the Timeout
// (150ms, where it is 100ms) is not cut at the Timeout: the booking stops
// waiting then, but the answer's slots come and serve the next bookings
// without a round trip. A client that ends a call its context cut may close
// the connection it was on (pgx does), so cutting it would cost a new
// connection each time. A store that hangs is cut at 4 times the Timeout.
func TestLimiterSlowAnswerIsNotCut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Let the round trips end; the test fails as a deadlock if the hung
		// one below is not cut by then.
		defer time.Sleep(time.Second)
		store := &memStore{}
		lim := newLimiter(t, store, 100, 50, nil) // a slot may be booked 490ms ahead
		warmUp(t, lim)
		store.set(func(s *memStore) { s.latency = 75 * time.Millisecond })
		start := time.Now()
		want := start.Add(400 * time.Millisecond)
		_, err := lim.Reserve(t.Context(), want)
		require.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the booking stopped waiting at the Timeout")
		time.Sleep(100 * time.Millisecond) // the answer came at 150ms; the pause after the failure is over
		// Its slot is 400ms after the store's now, which the warm-up's fast
		// round trip places exactly: at 475ms.
		late := start.Add(475 * time.Millisecond)
		r, err := lim.Reserve(t.Context(), late)
		require.NoError(t, err, "served from the late answer's slot")
		books, _, _ := store.stats()
		assert.Equal(t, 2, books, "the warm-up's and one: no second round trip")
		assert.False(t, r.Start.Before(late), "never before its place")
		// Late by the drift the clock's bounds allow for since the warm-up's
		// round trip: 200ppm of 1.15s.
		assert.WithinDuration(t, late, r.Start, 231*time.Microsecond)

		store.set(func(s *memStore) { s.hang = true })
		lim = newLimiter(t, store, 100, 1, nil)
		start = time.Now()
		_, err = lim.Reserve(t.Context(), start)
		require.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "a store that hangs: the booking stops waiting at the Timeout")
	})
}

// With Options.Fallback, a fleet whose store goes down mid-run goes on at
// that share of the rate in each process, never unlimited, and shares the
// store's rate again once it is back.
func TestLimiterFallsBackToAShareOfTheRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{latency: time.Millisecond}
		ctx, cancel := context.WithTimeout(t.Context(), 9*time.Second)
		defer cancel()
		phases := [3]starts{}
		t0 := time.Now()
		var wg sync.WaitGroup
		for range 4 {
			lim := newLimiter(t, store, 100, 8, &fleet.Options{Fallback: 0.25})
			for range 25 {
				wg.Go(func() {
					for {
						err := retry.Do(ctx, func(context.Context) error {
							phases[time.Since(t0)/(3*time.Second)].add(time.Now())
							return nil
						}, retry.Policy{MaxAttempts: 1, Limiter: lim})
						if ctx.Err() != nil || errors.Is(err, retry.ErrNoTimeLeft) {
							return
						}
					}
				})
			}
		}
		time.Sleep(3 * time.Second)
		store.set(func(s *memStore) { s.down = errStoreDown })
		time.Sleep(3 * time.Second)
		store.set(func(s *memStore) { s.down = nil })
		wg.Wait()
		// Across a switch, a window holds the store's slots on one side and
		// the fallbacks' on the other: at most the rate and the store's
		// burst, the fallbacks' bursts (2 each), and what the processes'
		// views of the schedule's end differ by (at most a batch, 50ms: 2
		// fallback slots each).
		across := 100 + 8 + 4*2 + 4*2
		for i, want := range []int{100 + 8, across, across} {
			got := phases[i].mostWithin(time.Second)
			t.Logf("phase %d: %d attempts, at most %d in a second", i, phases[i].count(), got)
			assert.LessOrEqual(t, got, want, "phase %d", i)
			assert.Greater(t, phases[i].count(), 3*80, "phase %d: the calls went on", i)
		}
	})
}

// A slot given back is handed out again, without a round trip; and the last
// booking's slot given back at once goes back to the store, so that a slow
// limit is not spent on an attempt that never started.
func TestLimiterCancelGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{}
		lim := newLimiter(t, store, 1, 1, nil) // a slot a second
		now := time.Now()
		r, err := lim.Reserve(t.Context(), now)
		require.NoError(t, err)
		assert.Equal(t, now, r.Start)
		assert.Equal(t, time.Second, r.Slack, "the time the rate takes to refill the burst")
		lim.Cancel(r)
		lim.Cancel(r) // twice is once
		synctest.Wait()
		_, _, refunds := store.stats()
		assert.Equal(t, 1, refunds, "the store took the slot back")
		r, err = lim.Reserve(t.Context(), now)
		require.NoError(t, err)
		assert.Equal(t, now, r.Start, "so the next attempt need not wait a second")

		r2, err := lim.Reserve(t.Context(), now)
		require.NoError(t, err)
		assert.Equal(t, now.Add(time.Second), r2.Start)
		lim.Cancel(r) // not the last booking: the store cannot take it back
		synctest.Wait()
		_, _, refunds = store.stats()
		assert.Equal(t, 1, refunds)

		// At 1000/s with a schedule booked ahead, slots come in batches; one
		// given back goes to the next booking.
		store = &memStore{}
		lim = newLimiter(t, store, 1000, 1, nil)
		for range 200 { // demand above the rate
			_, err := lim.Reserve(t.Context(), time.Now())
			require.NoError(t, err)
		}
		time.Sleep(50 * time.Millisecond)
		r, err = lim.Reserve(t.Context(), time.Now())
		require.NoError(t, err)
		next, err := lim.Reserve(t.Context(), time.Now())
		require.NoError(t, err)
		books, _, _ := store.stats()
		lim.Cancel(r)
		again, err := lim.Reserve(t.Context(), time.Now())
		require.NoError(t, err)
		assert.Equal(t, r.Start, again.Start, "the slot given back, handed out again")
		assert.True(t, next.Start.After(r.Start))
		books2, _, _ := store.stats()
		assert.Equal(t, books, books2, "no round trip")
	})
}

// A retry planned a little ahead gets a slot at its time, not before; one
// planned further than the burst's tolerance is booked that far ahead.
func TestLimiterBooksAhead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second)                  // let refunds sent in the background end
		lim := newLimiter(t, &memStore{}, 100, 5, nil) // tolerance 40ms
		now := time.Now()
		r, err := lim.Reserve(t.Context(), now.Add(30*time.Millisecond))
		require.NoError(t, err)
		assert.Equal(t, now.Add(30*time.Millisecond), r.Start)
		r, err = lim.Reserve(t.Context(), now.Add(time.Second))
		require.NoError(t, err)
		assert.Equal(t, now.Add(40*time.Millisecond), r.Start, "the loop starts it at its planned time")
		r, err = lim.Reserve(t.Context(), now.Add(-time.Hour))
		require.NoError(t, err)
		assert.Equal(t, now.Add(10*time.Millisecond), r.Start,
			"a time past counts as now; the two bookings ahead took the burst's tolerance, so the schedule's end (50ms) less 40ms")
	})
}

// A caller whose context ends while it waits for a round trip leaves at
// once; the round trip goes on for the others.
func TestLimiterWaiterLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{latency: 40 * time.Millisecond}
		lim := newLimiter(t, store, 100, 10, nil)
		warmUp(t, lim)
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(10*time.Millisecond, func() { cancel(errors.New("caller gone")) })
		var other retry.Reservation
		var otherErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(5 * time.Millisecond)
			other, otherErr = lim.Reserve(t.Context(), time.Now())
		})
		start := time.Now()
		_, err := lim.Reserve(ctx, start)
		assert.EqualError(t, err, "caller gone")
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		wg.Wait()
		require.NoError(t, otherErr)
		assert.Equal(t, start.Add(80*time.Millisecond), other.Start, "served by the same round trip")
		books, _, _ := store.stats()
		assert.Equal(t, 2, books, "the warm-up's and one")
	})
}

// warmUp lets lim's first contact with its store end (New reads the store's
// clock), books once, and lets a second pass, so that the slots it took
// have passed: a test that is about something else then starts from a
// limiter that knows the store's clock as well as its link lets it. It runs
// in a synctest bubble.
func warmUp(t *testing.T, lim *fleet.Limiter) {
	t.Helper()
	time.Sleep(time.Second) // New's reads of the clock come back
	_, err := lim.Reserve(t.Context(), time.Now())
	require.NoError(t, err)
	time.Sleep(time.Second)
}

// A near-zero rate admits its burst and then nothing for decades: its
// interval, a second divided by the rate, is beyond the int64 range of a
// Duration, and must not wrap to a negative one.
func TestLimiterNearZeroRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second) // let refunds sent in the background end
		store := &memStore{}
		lim := newLimiter(t, store, rate.Every(math.MaxInt64), 2, nil)
		now := time.Now()
		started := 0
		for i := range 10 {
			r, err := lim.Reserve(t.Context(), now)
			require.NoError(t, err, "booking %d", i)
			require.False(t, r.Start.Before(now), "booking %d starts at %v, before now", i, r.Start)
			if !r.Start.After(now.Add(time.Hour)) {
				started++
			}
		}
		assert.Equal(t, 2, started, "bookings that may start within the hour: the burst")

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return nil }, retry.Policy{Limiter: newLimiter(t, &memStore{}, rate.Every(math.MaxInt64), 2, nil)})
		require.NoError(t, err)
		err = retry.Do(ctx, func(context.Context) error { calls++; return nil }, retry.Policy{Limiter: lim})
		assert.ErrorIs(t, err, retry.ErrNoTimeLeft, "the next slot is decades away")
		assert.Equal(t, 1, calls)
	})
}

// New refuses input that would admit nothing or make no sense, with an
// error that names the field, instead of a Limiter whose every call fails.
func TestNewBadInput(t *testing.T) {
	t.Parallel()
	store := &memStore{}
	tests := []struct {
		name  string
		store fleet.Store
		r     rate.Limit
		burst int
		opts  *fleet.Options
		want  string
	}{
		{"nil store", nil, 10, 1, nil, "fleet: store is nil"},
		{"zero rate", store, 0, 1, nil, "fleet: rate 0 admits no attempt: it must be above 0 (rate.Inf for no limit)"},
		{"negative rate", store, -1, 1, nil, "fleet: rate -1 admits no attempt"},
		{"NaN rate", store, rate.Limit(math.NaN()), 1, nil, "fleet: rate NaN admits no attempt"},
		{"zero burst", store, 10, 0, nil, "fleet: burst 0 admits no attempt: it must be at least 1"},
		{"negative burst", store, 10, -3, nil, "fleet: burst -3 admits no attempt"},
		{"negative timeout", store, 10, 1, &fleet.Options{Timeout: -time.Second}, "fleet: Options.Timeout -1s is negative"},
		{"negative fallback", store, 10, 1, &fleet.Options{Fallback: -0.5}, "fleet: Options.Fallback -0.5 is not a share"},
		{"fallback above 1", store, 10, 1, &fleet.Options{Fallback: 2}, "fleet: Options.Fallback 2 is not a share"},
		{"NaN fallback", store, 10, 1, &fleet.Options{Fallback: math.NaN()}, "fleet: Options.Fallback NaN is not a share"},
		{"clocked without Now", noNow{store}, 10, 1, nil, "fleet: store fleet_test.noNow has BookClocked but no Now: a ClockedStore needs both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := fleet.New(tt.store, tt.r, tt.burst, tt.opts)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, lim)
		})
	}

	now := time.Now()
	r, err := newLimiter(t, store, rate.Inf, 0, nil).Reserve(t.Context(), now)
	require.NoError(t, err)
	assert.Equal(t, now, r.Start, "rate.Inf: no pacing, whatever the burst")
	books, _, _ := store.stats()
	assert.Zero(t, books, "and no round trip")

	_, err = new(fleet.Limiter).Reserve(t.Context(), now)
	assert.EqualError(t, err, "fleet: a Limiter must be made by New", "the zero Limiter fails, never panics")
}

// noNow is a ClockedStore as it was before it had Now.
type noNow struct{ m *memStore }

func (s noNow) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	return s.m.Book(ctx, sc, n, after)
}

func (s noNow) BookClocked(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	return s.m.BookClocked(ctx, sc, n, after)
}

func (s noNow) Refund(ctx context.Context, sc fleet.Schedule, mark int64, n int) (bool, error) {
	return s.m.Refund(ctx, sc, mark, n)
}

// reordering is a store whose refunds take longer than its bookings, as on
// a network that delivers one connection's messages before another's; and
// whose bookings, while gate is set, wait for it to close.
type reordering struct {
	*memStore
	refundDelay time.Duration
	mu          sync.Mutex
	gate        chan struct{}
	held        chan struct{} // gets a value when a booking waits at the gate
}

func (s *reordering) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	wait, mark, _, err := s.BookClocked(ctx, sc, n, after)
	return wait, mark, err
}

func (s *reordering) BookClocked(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	s.mu.Lock()
	gate, held := s.gate, s.held
	s.mu.Unlock()
	if gate != nil {
		held <- struct{}{}
		<-gate
	}
	return s.memStore.BookClocked(ctx, sc, n, after)
}

func (s *reordering) Refund(ctx context.Context, sc fleet.Schedule, mark int64, n int) (bool, error) {
	time.Sleep(s.refundDelay)
	return s.memStore.Refund(ctx, sc, mark, n)
}

func (s *reordering) hold() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate, s.held = make(chan struct{}), make(chan struct{}, 1)
	return s.held
}

func (s *reordering) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

// A slot given back (a call's deadline came first, or it was cancelled) is
// not lost when the process's next booking would reach the store before the
// refund: the booking waits for the refund, and takes the place given back.
// Real goroutines and a real clock, no synctest: the refund and the booking
// race as they do in production. The places are the store's own, so the
// checks do not depend on the machine's speed.
func TestLimiterCancelledSlotIsNotLostToTheNextBooking(t *testing.T) {
	t.Parallel()
	mem := &memStore{latency: 2 * time.Millisecond}
	store := &reordering{memStore: mem, refundDelay: 20 * time.Millisecond}
	lim := newLimiter(t, store, 5, 1, &fleet.Options{Timeout: time.Minute}) // a slot every 200ms
	ctx := t.Context()

	_, err := lim.Reserve(ctx, time.Now())
	require.NoError(t, err)
	r2, err := lim.Reserve(ctx, time.Now())
	require.NoError(t, err)
	lim.Cancel(r2) // its refund takes 20ms to reach the store, the next booking 2ms
	_, err = lim.Reserve(ctx, time.Now())
	require.NoError(t, err)
	places := mem.booked()
	require.Len(t, places, 3)
	assert.Equal(t, places[1], places[2], "the next booking took the place given back")
	_, _, refunds := mem.stats()
	assert.Equal(t, 1, refunds, "the store took the slot back")

	// The same through the loop: a call whose deadline comes before its slot
	// gives it back, and the next call gets it.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = retry.Do(short, func(context.Context) error { return nil }, retry.Policy{Limiter: lim})
	require.ErrorIs(t, err, context.DeadlineExceeded, "its slot is 200ms away")
	start := time.Now()
	var started time.Time
	require.NoError(t, retry.Do(ctx, func(context.Context) error { started = time.Now(); return nil }, retry.Policy{Limiter: lim}))
	places = mem.booked()
	require.Len(t, places, 5)
	assert.Equal(t, places[3], places[4], "the next call took the place given back")
	t.Logf("the next call started %v after it was made (a slot every 200ms)", started.Sub(start))

	// A slot given back while a booking is under way stays with the process
	// (a refund would reach the store after that booking, and be refused):
	// the booking's waiter takes it, and the slot that booking made goes
	// back to the store instead, for the next booking.
	r6, err := lim.Reserve(ctx, time.Now())
	require.NoError(t, err)
	held := store.hold()
	var r7 retry.Reservation
	var wg sync.WaitGroup
	wg.Go(func() {
		r7, err = lim.Reserve(ctx, time.Now())
	})
	<-held // r7's booking is under way
	lim.Cancel(r6)
	store.open()
	wg.Wait()
	require.NoError(t, err)
	assert.Equal(t, r6.Start, r7.Start, "the waiter took the slot given back")
	_, err = lim.Reserve(ctx, time.Now())
	require.NoError(t, err)
	places = mem.booked()
	require.Len(t, places, 8)
	assert.Equal(t, places[6], places[7], "the unneeded slot of the booking under way went back, and the next booking took it")
}

// plainStore hides a store's clock: a Store, not a ClockedStore.
type plainStore struct{ fleet.Store }

// Round trips that take anything from 0 to 90ms, on the way out, on the way
// back or both (well inside the timeout), do not let the fleet through above
// its limit, from its very first attempt: each process places its batches
// by the store's clock, as late as its round trips so far allow, and leaves
// the schedule free after each batch for as long as that placing may be late
// (see Limiter). Three processes share 1,000/s with a burst of 5, and want
// more. A steady link slower than the interval (80ms round trips, where a
// slot comes every 1ms) costs pads that no probe narrows: batches grow to
// keep them small against the rate. The run is logged, with the same run
// through a plain Store (placed by when each answer came), which goes above.
func TestLimiterHoldsUnderUnevenLatency(t *testing.T) {
	t.Parallel()
	for _, link := range []struct {
		name  string
		store func() *memStore
		// The least share of the rate used from the first second on, from
		// a ClockedStore (0: the link is run on a plain Store only): over
		// 200 runs, 0.986, 0.988 and 0.983 on average on the links whose
		// delays vary (standard deviations 0.005, 0.005 and 0.003, the
		// least 0.973, 0.975 and 0.976), and 0.921 every time on the steady
		// one, whose pads of 79ms follow batches of a second.
		rate float64
	}{
		{"requests delayed 0-90ms", func() *memStore { return &memStore{jitter: 90 * time.Millisecond, outOnly: true} }, 0.93},
		{"replies delayed 0-90ms", func() *memStore { return &memStore{jitter: 90 * time.Millisecond, backOnly: true} }, 0.93},
		{"each way delayed 0-45ms", func() *memStore { return &memStore{jitter: 45 * time.Millisecond} }, 0.93},
		{"each way 40ms, steady", func() *memStore { return &memStore{latency: 40 * time.Millisecond} }, 0.92},
		{"loopback", func() *memStore { return &memStore{latency: 50 * time.Microsecond} }, 0},
	} {
		for _, clocked := range []bool{true, false} {
			name := link.name
			if !clocked {
				name = "plain Store, " + name
			} else if link.rate == 0 {
				continue
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := fleetRun(t, link.store(), clocked, 0)
				t.Logf("over the whole run, at most %d in 10ms, %d in 100ms, %d in 1s; %d in 5s from the first second on",
					r.in10ms, r.in100ms, r.in1s, r.warm)
				// The rate over the window plus the burst, from the first
				// attempt on.
				assert.LessOrEqual(t, r.in10ms, 10+5)
				assert.LessOrEqual(t, r.in100ms, 100+5)
				assert.LessOrEqual(t, r.in1s, 1000+5)
				if clocked {
					assert.GreaterOrEqual(t, float64(r.warm), link.rate*5000, "the rate is used")
				}
			})
		}
	}
}

// Below the limit, with the replies delayed 0 to 90ms, the schedule is not
// booked ahead, so a slot placed at the store's now passes before its answer
// is back: the bound holds all the same, and no booking is starved of its
// slot (each process asks for slots as far ahead as its answers lately
// took, so that they do not pass on the way). Three processes of 50
// goroutines, each calling once every 166ms when it has its attempt: about
// 900 a second when each waits for nothing, against a limit of 1,000.
func TestLimiterHoldsBelowTheLimit(t *testing.T) {
	t.Parallel()
	r := fleetRun(t, &memStore{jitter: 90 * time.Millisecond, backOnly: true}, true, 166*time.Millisecond)
	t.Logf("at most %d in 10ms, %d in 100ms, %d in 1s; %d in 5s from the first second on; the process served least, %d",
		r.in10ms, r.in100ms, r.in1s, r.warm, r.least)
	assert.LessOrEqual(t, r.in10ms, 10+5)
	assert.LessOrEqual(t, r.in100ms, 100+5)
	// Each call waits for its answer (45ms on average) and for its slot,
	// asked for as far ahead as the answers lately took: over 200 runs, the
	// process served least made 915 attempts on average (standard
	// deviation 85, the fewest 601), where a call that waited for nothing
	// would let it make 1,800.
	assert.GreaterOrEqual(t, r.least, 400, "every process is served")
}

// fleetResult is what fleetRun measured.
type fleetResult struct {
	in10ms, in100ms, in1s int // the most attempts in any window, over the whole run
	warm                  int // the attempts from the first second on
	least                 int // the fewest attempts one process made
}

// fleetRun runs three processes sharing 1,000/s with a burst of 5 through
// mem for 6s, in a synctest bubble, each with its own Limiter (Timeout 1s)
// and 50 goroutines that call as fast as they may, or once every pace.
func fleetRun(t *testing.T, mem *memStore, clocked bool, pace time.Duration) (res fleetResult) {
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(2 * time.Second) // let refunds and probes sent in the background end
		var store fleet.Store = mem
		if !clocked {
			store = plainStore{mem}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
		defer cancel()
		t0 := time.Now()
		var all starts
		recs := make([]starts, 3)
		var wg sync.WaitGroup
		for p := range recs {
			lim := newLimiter(t, store, 1000, 5, &fleet.Options{Timeout: time.Second})
			if pace == 0 {
				hammer(ctx, &wg, lim, 50, &recs[p])
			} else {
				paced(ctx, &wg, lim, 50, pace, &recs[p])
			}
		}
		wg.Wait()
		res.least = math.MaxInt
		for p := range recs {
			res.least = min(res.least, recs[p].count())
			for _, s := range recs[p].at {
				all.add(s)
				if !s.Before(t0.Add(time.Second)) {
					res.warm++
				}
			}
		}
		res.in10ms, res.in100ms, res.in1s = all.mostWithin(10*time.Millisecond), all.mostWithin(100*time.Millisecond), all.mostWithin(time.Second)
	})
	return res
}

// paced runs goroutines that call Do through lim, one attempt each, and
// wait every between calls, until ctx ends, and records each attempt's
// start. Each starts at a random point of its first wait.
func paced(ctx context.Context, wg *sync.WaitGroup, lim retry.Limiter, goroutines int, every time.Duration, rec *starts) {
	for range goroutines {
		wg.Go(func() {
			time.Sleep(rand.N(every))
			for {
				err := retry.Do(ctx, func(context.Context) error {
					rec.add(time.Now())
					return nil
				}, retry.Policy{MaxAttempts: 1, Limiter: lim})
				if ctx.Err() != nil || errors.Is(err, retry.ErrNoTimeLeft) {
					return // the run is over
				}
				time.Sleep(every)
			}
		})
	}
}

// A process's first contact reads the store's clock four times at once, twice
// over, before it books; then each booking leaves the schedule free after its
// batch for as long as the bounds on the store's clock are wide, less an
// interval, and the process reads the clock again while that costs the
// rate: often while the reads narrow the bounds, less and less often when
// they cannot (a steady link). On a link faster than an interval there is
// no pad and no probe after the first contact; a plain Store (no clock) is
// never read, and its pads cover the slowest round trip lately.
func TestLimiterPadsAndProbes(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, mem *memStore, store fleet.Store, r rate.Limit) (spans []time.Duration, reads []int) {
		synctest.Test(t, func(t *testing.T) {
			defer time.Sleep(2 * time.Second)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var rec starts
			hammer(ctx, &wg, newLimiter(t, store, r, 1, &fleet.Options{Timeout: time.Second}), 5, &rec)
			for range 10 {
				time.Sleep(time.Second)
				_, n := mem.bookings()
				reads = append(reads, n)
			}
			wg.Wait()
			spans, _ = mem.bookings()
		})
		return spans, reads
	}
	const T = 10 * time.Millisecond // 100/s
	t.Run("fast link", func(t *testing.T) {
		t.Parallel()
		mem := &memStore{latency: 100 * time.Microsecond}
		spans, reads := run(t, mem, mem, 100)
		assert.Equal(t, []int{8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, reads, "the first contact's reads, and no more")
		for i, span := range spans {
			require.Zero(t, span%T, "booking %d left a pad", i)
		}
	})
	t.Run("steady slow link", func(t *testing.T) {
		t.Parallel()
		mem := &memStore{latency: 40 * time.Millisecond}
		spans, reads := run(t, mem, mem, 100)
		// The bounds are 80ms wide: a pad of 70ms after each batch, and
		// batches of 49 pads, but at most a second (100 slots), once the
		// process takes the whole rate.
		for i, span := range spans {
			require.GreaterOrEqual(t, span, T+70*time.Millisecond, "booking %d: %v, no pad", i, span)
			require.LessOrEqual(t, span, 100*T+71*time.Millisecond, "booking %d: %v, longer than a second and a pad", i, span)
		}
		assert.GreaterOrEqual(t, slices.Max(spans), 100*T+70*time.Millisecond, "a batch of a second")
		// The gap between reads doubles after each 16 reads in a row that
		// did not narrow the bounds, from 5ms up to 1s.
		t.Logf("clock reads by the end of each second: %v", reads)
		assert.GreaterOrEqual(t, reads[0], 20, "reads at first")
		assert.LessOrEqual(t, reads[9]-reads[7], 10, "fewer and fewer, since they cannot narrow the bounds")
	})
	t.Run("plain Store", func(t *testing.T) {
		t.Parallel()
		// No clock to read: a booking's slots may start late by its own
		// round trip, so the pad covers the slowest round trip lately.
		mem := &memStore{latency: 40 * time.Millisecond}
		spans, reads := run(t, mem, plainStore{mem}, 100)
		assert.Equal(t, 0, reads[9], "no clock to read")
		for i, span := range spans[1:] {
			require.GreaterOrEqual(t, span, T+70*time.Millisecond, "booking %d: %v, no pad", i+1, span)
		}
	})
}

// A process's first contact with a ClockedStore reads its clock four times
// at once, twice over (New starts it), and then books, with a pad from the
// bounds those reads give: the first reads open the client's connections,
// whose dials would otherwise make the first bounds, and the first pads,
// wide. The first booking waits for New's reads, within its Timeout: a
// store that hangs fails it at the Timeout, one that refuses fails it at
// once; once New's reads have failed, a booking reads the clock itself.
func TestLimiterFirstContact(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(time.Second)
		store := &memStore{latency: 2 * time.Millisecond}
		lim := newLimiter(t, store, 100, 1, nil)
		start := time.Now()
		r, err := lim.Reserve(t.Context(), start)
		require.NoError(t, err)
		assert.Equal(t, 12*time.Millisecond, time.Since(start), "two rounds of reads and the booking: three round trips")
		// The store booked the slot at its now, 10ms in; the bounds, 4ms
		// wide, place that now at the latest 2ms later: when the answer
		// came.
		assert.Equal(t, start.Add(12*time.Millisecond), r.Start)
		spans, reads := store.bookings()
		assert.Equal(t, 8, reads)
		assert.Equal(t, []time.Duration{10 * time.Millisecond}, spans, "bounds 4ms wide: no pad, one slot")

		store = &memStore{hang: true}
		lim = newLimiter(t, store, 100, 1, nil)
		start = time.Now()
		_, err = lim.Reserve(t.Context(), start)
		assert.ErrorContains(t, err, "fleet: limiter store unavailable: no answer within 100ms")
		assert.Equal(t, 100*time.Millisecond, time.Since(start))

		store = &memStore{down: errStoreDown}
		lim = newLimiter(t, store, 100, 1, nil)
		start = time.Now()
		_, err = lim.Reserve(t.Context(), start)
		assert.ErrorIs(t, err, errStoreDown)
		assert.Zero(t, time.Since(start))
		assert.Empty(t, store.asked(), "no booking without the clock")

		// Back after New's reads failed: the first booking after the pause
		// reads the clock itself.
		store.set(func(s *memStore) { s.down, s.latency = nil, 2*time.Millisecond })
		time.Sleep(time.Second)
		start = time.Now()
		r, err = lim.Reserve(t.Context(), start)
		require.NoError(t, err)
		assert.Equal(t, start.Add(12*time.Millisecond), r.Start, "two rounds of reads and the booking")
		_, reads = store.bookings()
		assert.Equal(t, 8, reads)
	})
}

// The bound holds whatever the rate, the burst, the link and the demand:
// over 48 fleets drawn from a seeded generator (rates of 100, 200 and
// 1,000 a second, bursts of 1, 3 and 10, two or three processes, a link
// whose delays vary on the way out, back or both, or a steady slow one, a
// ClockedStore or a plain Store, and callers that want more than the rate
// or less), no window of 10ms,
// 100ms or 1s holds more than rate x window + burst attempts, and every
// fleet is served.
func TestLimiterBoundProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(27, 2026))
	links := []func() *memStore{
		func() *memStore { return &memStore{jitter: 90 * time.Millisecond, outOnly: true} },
		func() *memStore { return &memStore{jitter: 90 * time.Millisecond, backOnly: true} },
		func() *memStore { return &memStore{jitter: 45 * time.Millisecond} },
		func() *memStore { return &memStore{latency: 30 * time.Millisecond} },
	}
	for i := range 48 {
		r := []rate.Limit{100, 200, 1000}[rng.IntN(3)]
		burst := []int{1, 3, 10}[rng.IntN(3)]
		procs := 2 + rng.IntN(2)
		link := rng.IntN(len(links))
		clocked := rng.IntN(3) > 0
		var pace time.Duration // 0: as fast as the limit lets them
		if rng.IntN(2) == 0 {
			// Each process's 20 callers want about 2/3 of the rate together.
			pace = time.Duration(float64(20*procs) / (float64(r) * 2 / 3) * float64(time.Second))
		}
		name := fmt.Sprintf("%d: %v/s burst %d, %d processes, link %d, clocked %v, pace %v", i, r, burst, procs, link, clocked, pace)
		synctest.Test(t, func(t *testing.T) {
			defer time.Sleep(2 * time.Second)
			mem := links[link]()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			var rec starts
			var wg sync.WaitGroup
			var store fleet.Store = mem
			if !clocked {
				store = plainStore{mem}
			}
			for range procs {
				lim := newLimiter(t, store, r, burst, &fleet.Options{Timeout: time.Second})
				if pace == 0 {
					hammer(ctx, &wg, lim, 20, &rec)
				} else {
					paced(ctx, &wg, lim, 20, pace, &rec)
				}
			}
			wg.Wait()
			for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
				bound := int(float64(r)*w.Seconds()) + burst
				if most := rec.mostWithin(w); most > bound {
					t.Errorf("%s: %d attempts in %v, bound %d", name, most, w, bound)
				}
			}
			// Callers that wait for each slot, on a link whose answers
			// take up to 90ms, make fewer: not none.
			if rec.count() < int(float64(r)*3/10) {
				t.Errorf("%s: %d attempts in 3s, fewer than a tenth of the rate's", name, rec.count())
			}
		})
	}
}

// Below the limit, a call waits for its slot about a round trip when the
// link is faster than an interval, as a Limiter without pads would make it
// wait; on a steady link slower than an interval, the pads make bookings
// crowd the schedule, and calls wait for batches instead. Three processes of
// 20 callers, who want half the rate together, with a burst of 5; the mean
// and the median wait of a call are logged for each link and rate (see the
// README's "How it books"), and the median asserted on the fast link (the
// mean moves with the moments when more callers than the burst come
// together, and wait for the rate, as they should).
func TestLimiterWaitBelowTheLimit(t *testing.T) {
	t.Parallel()
	for _, latency := range []time.Duration{100 * time.Microsecond, 2 * time.Millisecond, 40 * time.Millisecond} {
		for _, r := range []float64{200, 1000} {
			var waits []time.Duration
			synctest.Test(t, func(t *testing.T) {
				defer time.Sleep(2 * time.Second)
				mem := &memStore{latency: latency}
				ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
				defer cancel()
				var mu sync.Mutex
				var wg sync.WaitGroup
				every := time.Duration(float64(time.Second) * 60 / (r / 2))
				for range 3 {
					lim := newLimiter(t, mem, rate.Limit(r), 5, &fleet.Options{Timeout: time.Second})
					for range 20 {
						wg.Go(func() {
							time.Sleep(rand.N(every))
							for ctx.Err() == nil {
								start := time.Now()
								if retry.Do(ctx, func(context.Context) error { return nil }, retry.Policy{MaxAttempts: 1, Limiter: lim}) != nil {
									return
								}
								mu.Lock()
								waits = append(waits, time.Since(start))
								mu.Unlock()
								time.Sleep(every)
							}
						})
					}
				}
				wg.Wait()
			})
			require.NotEmpty(t, waits)
			var total time.Duration
			for _, w := range waits {
				total += w
			}
			slices.Sort(waits)
			median := waits[len(waits)/2]
			t.Logf("round trips of %v, %v/s: a call waits %v on average, %v the median", 2*latency, r, total/time.Duration(len(waits)), median)
			if latency < time.Millisecond {
				assert.LessOrEqual(t, median, 2*latency, "%v/s on a fast link: a round trip", r)
			}
		}
	}
}

// The fleet limiter where it meets the rest of the loop: hedged calls that
// also retry, with a budget and a deadline, through limiters whose store
// answers slowly and unevenly (replies 0-60ms). Every attempt, first, retry
// or hedge, takes a slot, so the fleet keeps its limit; no call outlives its
// deadline; and a booking whose attempt will not happen (a loser's, one past
// the deadline) is given back, so the rate the calls leave is used.
func TestLimiterThroughHedgedRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		defer time.Sleep(2 * time.Second)
		mem := &memStore{jitter: 60 * time.Millisecond, backOnly: true}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		errBusy := errors.New("busy") // retryable: the default classifier has no opinion
		var rec starts
		var mu sync.Mutex
		var calls, late, failed int
		var wg sync.WaitGroup
		for p := range 3 {
			lim := newLimiter(t, mem, 200, 5, &fleet.Options{Timeout: time.Second})
			policy := retry.Policy{
				MaxAttempts: 3,
				HedgeDelay:  retry.Constant(10 * time.Millisecond),
				Backoff:     retry.Constant(20 * time.Millisecond),
				Limiter:     lim,
				Budget:      retry.NewBudget(0.5, 10),
			}
			for g := range 20 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), uint64(g)))
					for ctx.Err() == nil {
						call, stop := context.WithTimeout(ctx, 300*time.Millisecond)
						start := time.Now()
						err := retry.Do(call, func(ctx context.Context) error {
							rec.add(time.Now())
							select {
							case <-time.After(15 * time.Millisecond):
							case <-ctx.Done():
								return ctx.Err()
							}
							if rng.IntN(2) == 0 {
								return errBusy
							}
							return nil
						}, policy)
						elapsed := time.Since(start)
						stop()
						mu.Lock()
						calls++
						if elapsed > 300*time.Millisecond {
							late++
						}
						if err != nil {
							failed++
						}
						mu.Unlock()
						if errors.Is(err, retry.ErrNoTimeLeft) {
							// The schedule is booked further ahead than the
							// deadline: the call stopped at once, and a user
							// would not call again in the same instant.
							time.Sleep(10 * time.Millisecond)
						}
					}
				})
			}
		}
		wg.Wait()
		t.Logf("%d calls (%d failed), %d attempts; at most %d in 100ms, %d in 1s",
			calls, failed, rec.count(), rec.mostWithin(100*time.Millisecond), rec.mostWithin(time.Second))
		assert.LessOrEqual(t, rec.mostWithin(100*time.Millisecond), 20+5, "first attempts, retries and hedges alike")
		assert.LessOrEqual(t, rec.mostWithin(time.Second), 200+5)
		assert.Zero(t, late, "no call outlives its deadline")
		assert.Greater(t, failed, 0, "some calls fail, so retries happen")
		assert.GreaterOrEqual(t, rec.count(), 5*200*8/10, "the rate is used")
	})
}
