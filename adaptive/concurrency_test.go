package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// Against a storage that serves C writes at once at its base latency and
// queues the rest, with three times C writers and no limit configured, every
// 5s window after the first 10s holds at most 1.3C in flight and writes at
// least 0.8 of what the storage serves at capacity; when C halves or
// doubles at 30s, the windows from 35s on meet the same bounds for the new
// C. The latencies spread over a tenth of the base, or, in the wide cases,
// over half of it (20-30ms, as 40-60ms in retrysim's ingestion study): a
// round's mean is then noisier, and the limit must not read noise as a
// queue, nor as room.
func TestConcurrencyFindsTheCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		before, after int
		spread        float64 // 0: a tenth
	}{
		{"20", 20, 20, 0},
		{"50", 50, 50, 0},
		{"200", 200, 200, 0},
		{"100 halves", 100, 50, 0},
		{"50 doubles", 50, 100, 0},
		{"20 wide", 20, 20, 0.5},
		{"100 wide", 100, 100, 0.5},
		{"100 halves wide", 100, 50, 0.5},
		{"100 doubles wide", 100, 200, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const change, end = 30 * time.Second, 60 * time.Second
				capacity := func(since time.Duration) int {
					if since >= change {
						return tt.after
					}
					return tt.before
				}
				st := newStorage(capacity, 20*time.Millisecond)
				if tt.spread > 0 {
					st.spread = tt.spread
				}
				slots := &adaptive.Concurrency{}
				l := &load{slots: slots, write: st.write, start: st.start, window: 5 * time.Second}
				l.run(3*max(tt.before, tt.after), end, 0)
				report := l.report()
				for i, s := range l.spans {
					from := time.Duration(i) * l.window
					c := capacity(from)
					if from < 10*time.Second || (from >= change && from < change+5*time.Second) || from >= end {
						continue
					}
					assert.LessOrEqual(t, float64(s.peak), 1.3*float64(c), "peak in flight from %v\n%s", from, report)
					assert.GreaterOrEqual(t, float64(s.written)/l.window.Seconds(), 0.8*st.perSecond(c),
						"written from %v\n%s", from, report)
				}
				t.Logf("C = %d then %d, final limit %d\n%s", tt.before, tt.after, slots.Limit(), report)
			})
		})
	}
}

// A backlog of writes, done by more writers than the storage serves at
// once, drains within 1.15 times as long as it takes with the best fixed
// limit, C, without the Concurrency being told C; with latencies spread
// over a tenth of the base, or over half of it.
func TestConcurrencyDrainsABacklog(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		c      int
		spread float64
	}{{20, 0.1}, {50, 0.1}, {200, 0.1}, {20, 0.5}, {100, 0.5}} {
		c := tt.c
		t.Run(fmt.Sprintf("%d spread %.1f", c, tt.spread), func(t *testing.T) {
			t.Parallel()
			drain := func(slots retry.Concurrency) time.Duration {
				var took time.Duration
				synctest.Test(t, func(t *testing.T) {
					st := newStorage(func(time.Duration) int { return c }, 20*time.Millisecond)
					st.spread = tt.spread
					l := &load{slots: slots, write: st.write, start: st.start, window: 5 * time.Second}
					took = l.run(3*c, 0, int64(c)*1000)
				})
				return took
			}
			fixed := drain(&retry.ConcurrencyLimit{Slots: c})
			learned := drain(&adaptive.Concurrency{})
			t.Logf("C = %d, spread %.1f: fixed %v, learned %v (%.3f)", c, tt.spread, fixed, learned, float64(learned)/float64(fixed))
			assert.LessOrEqual(t, float64(learned), 1.15*float64(fixed), "fixed %v, learned %v", fixed, learned)
		})
	}
}

// A dependency that refuses with 429 the writes above 40 in flight, and
// serves the others at its base latency, so that no queue ever shows: the
// throttling answers alone bring the limit down to about 40, and keep it
// there.
func TestConcurrencyThrottlingLowersTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const quota = 40
		st := newStorage(func(time.Duration) int { return 1000 }, 20*time.Millisecond)
		var inFlight atomic.Int64
		write := func(ctx context.Context) error {
			if inFlight.Add(1) > quota {
				inFlight.Add(-1)
				time.Sleep(time.Millisecond)
				return errThrottled
			}
			defer inFlight.Add(-1)
			return st.write(ctx)
		}
		slots := &adaptive.Concurrency{InitialLimit: 100}
		l := &load{slots: slots, write: write, start: st.start, window: 5 * time.Second}
		l.run(200, 30*time.Second, 0)
		report := l.report()
		for i, s := range l.spans {
			if from := time.Duration(i) * l.window; from >= 10*time.Second && from < 30*time.Second {
				assert.LessOrEqual(t, s.limitHigh, quota*13/10, "limit from %v\n%s", from, report)
				assert.GreaterOrEqual(t, s.limitLow, quota/2, "limit from %v\n%s", from, report)
				assert.Less(t, float64(s.throttled), 0.1*float64(s.written), "throttled from %v\n%s", from, report)
				assert.GreaterOrEqual(t, float64(s.written)/l.window.Seconds(), 0.7*st.perSecond(quota), "written from %v\n%s", from, report)
			}
		}
		t.Logf("final limit %d\n%s", slots.Limit(), report)
	})
}

// Attempts the loop cut (their error Is context.Canceled, wrapped or not)
// teach nothing: a run in which every attempt is cut, with the limit
// reached and attempts waiting all along, and latencies that would move
// it either way, leaves it where it began.
func TestConcurrencyLearnsNothingFromCancelledAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slots := &adaptive.Concurrency{InitialLimit: 10}
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := range 30 {
			wg.Go(func() {
				for i := range 500 {
					release, err := slots.Acquire(ctx, time.Time{})
					if !assert.NoError(t, err) {
						return
					}
					d := time.Duration(1+(w*i)%50) * time.Millisecond
					time.Sleep(d)
					var cut error = context.Canceled
					if i%2 == 1 {
						cut = fmt.Errorf("attempt cut: %w", context.Canceled)
					}
					release(d, cut)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 10, slots.Limit())
		assert.Zero(t, slots.InFlight())
		assert.Zero(t, slots.Waiting())
	})
}

// Attempts that find every slot taken wait in arrival order, and each slot
// given back goes to the longest waiter, not to a newcomer.
func TestConcurrencyWaitersInArrivalOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slots := &adaptive.Concurrency{InitialLimit: 1, MaxLimit: 1}
		ctx := context.Background()
		first, err := slots.Acquire(ctx, time.Time{})
		require.NoError(t, err)
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := range 5 {
			wg.Go(func() {
				release, err := slots.Acquire(ctx, time.Time{})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				release(time.Millisecond, context.Canceled)
			})
			synctest.Wait() // waiting before the next arrives
		}
		assert.Equal(t, 5, slots.Waiting())
		// A newcomer, with a free slot about to be given back, still finds
		// none: the slot goes to the first waiter.
		first(time.Millisecond, context.Canceled)
		_, ok := slots.TryAcquire()
		assert.False(t, ok, "a newcomer took the slot of a waiter")
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
		assert.Zero(t, slots.InFlight())
	})
}

// A wait ends with retry.ErrNoSlot exactly when by passes, and with the
// cause of ctx when ctx ends; neither takes a slot, and a by already past
// or a ctx already done does not wait at all.
func TestConcurrencyWaitIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slots := &adaptive.Concurrency{InitialLimit: 1, MaxLimit: 1}
		held, err := slots.Acquire(context.Background(), time.Time{})
		require.NoError(t, err)

		start := time.Now()
		_, err = slots.Acquire(context.Background(), start.Add(time.Second))
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		assert.Equal(t, time.Second, time.Since(start), "waited until by, exactly")

		_, err = slots.Acquire(context.Background(), time.Now())
		assert.ErrorIs(t, err, retry.ErrNoSlot, "by already passed")
		assert.Equal(t, time.Second, time.Since(start), "no wait")

		cause := errors.New("the caller gave up")
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
		_, err = slots.Acquire(ctx, time.Now().Add(time.Hour))
		assert.Equal(t, cause, err)
		assert.Equal(t, 1300*time.Millisecond, time.Since(start))

		_, err = slots.Acquire(ctx, time.Time{})
		assert.Equal(t, cause, err, "ctx already done")

		assert.Equal(t, 1, slots.InFlight())
		assert.Zero(t, slots.Waiting())
		held(0, nil)
		assert.Zero(t, slots.InFlight())
	})
}

// A release called twice gives back one slot: the second call is ignored.
func TestConcurrencyReleaseTwiceIsHarmless(t *testing.T) {
	t.Parallel()
	slots := &adaptive.Concurrency{InitialLimit: 2, MaxLimit: 2}
	ctx := context.Background()
	a, err := slots.Acquire(ctx, time.Time{})
	require.NoError(t, err)
	b, err := slots.Acquire(ctx, time.Time{})
	require.NoError(t, err)
	a(time.Millisecond, nil)
	a(time.Millisecond, nil)
	assert.Equal(t, 1, slots.InFlight(), "b still holds its slot")
	_, err = slots.Acquire(ctx, time.Time{})
	require.NoError(t, err)
	_, ok := slots.TryAcquire()
	assert.False(t, ok, "the second release freed no slot")
	b(time.Millisecond, context.Canceled)
	b(time.Millisecond, context.Canceled)
	assert.Equal(t, 1, slots.InFlight())
}

// When the limit grows, attempts already waiting are given the new slots at
// once, without waiting for a release.
func TestConcurrencyGrowthAdmitsWaiters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slots := &adaptive.Concurrency{InitialLimit: 4}
		ctx := context.Background()
		var (
			mu      sync.Mutex
			granted []func(time.Duration, error)
			wg      sync.WaitGroup
		)
		for range 20 {
			wg.Go(func() {
				release, err := slots.Acquire(ctx, time.Time{})
				if assert.NoError(t, err) {
					mu.Lock()
					granted = append(granted, release)
					mu.Unlock()
				}
			})
		}
		synctest.Wait()
		// Every attempt given a slot succeeds at one latency, whatever is
		// in flight: the dependency has room, and each round the limit
		// grows. The waiters given the new slots are released in turn.
		for rounds := 0; slots.Waiting() > 0 && rounds < 100; rounds++ {
			mu.Lock()
			held := granted
			granted = nil
			mu.Unlock()
			before := slots.Waiting()
			for _, release := range held {
				release(10*time.Millisecond, nil)
			}
			synctest.Wait()
			require.LessOrEqual(t, slots.Waiting(), before)
		}
		assert.Zero(t, slots.Waiting())
		assert.Greater(t, slots.Limit(), 4, "grew")
		wg.Wait()
	})
}

// Many goroutines acquiring and releasing at once, some giving up their
// wait by their context or their by: no slot is lost or given twice, and
// the limit is never exceeded by more than what a cut leaves in flight.
func TestConcurrencyNoLeakUnderContention(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slots := &adaptive.Concurrency{InitialLimit: 8, MaxLimit: 16}
		var wg sync.WaitGroup
		var inside atomic.Int64
		for w := range 64 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 3))
				for range 300 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*time.Millisecond)
					var by time.Time
					if rng.IntN(2) == 0 {
						by = time.Now().Add(time.Duration(rng.IntN(20)) * time.Millisecond)
					}
					release, err := slots.Acquire(ctx, by)
					cancel()
					if err != nil {
						continue
					}
					assert.LessOrEqual(t, inside.Add(1), int64(16))
					d := time.Duration(1+rng.IntN(5)) * time.Millisecond
					time.Sleep(d)
					inside.Add(-1)
					var errs = []error{nil, context.Canceled, errThrottled, context.DeadlineExceeded}
					release(d, errs[rng.IntN(len(errs))])
				}
			})
		}
		wg.Wait()
		assert.Zero(t, slots.InFlight())
		assert.Zero(t, slots.Waiting())
		assert.Zero(t, inside.Load())
	})
}

// A limit that is not reached never grows, however much room the
// dependency has: 5 writers against a limit of 20 and a dependency that
// answers every write at its base latency leave the limit at 20 (the guard
// against Netflix/concurrency-limits#134, a limit that grows without bound
// while nothing uses it).
func TestConcurrencyUnreachedLimitDoesNotGrow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newStorage(func(time.Duration) int { return 1000 }, 20*time.Millisecond)
		slots := &adaptive.Concurrency{}
		l := &load{slots: slots, write: st.write, start: st.start, window: 5 * time.Second}
		l.run(5, 30*time.Second, 0)
		assert.Equal(t, 20, slots.Limit(), "\n%s", l.report())
	})
}
