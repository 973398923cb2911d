package retry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// inFlightGauge counts the attempts running at once, and the most seen.
type inFlightGauge struct {
	now, peak atomic.Int64
}

func (g *inFlightGauge) enter() {
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *inFlightGauge) leave() { g.now.Add(-1) }

// Many calls sharing a fixed limit, each retrying and hedging, never hold
// more attempts in flight than its slots, and every slot comes back.
func TestConcurrencyLimitNeverExceeded(t *testing.T) {
	t.Parallel()
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hedged=%v", hedged), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := &retry.ConcurrencyLimit{Slots: 3}
				var g inFlightGauge
				var calls atomic.Int64
				p := retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(time.Millisecond), Concurrency: lim}
				if hedged {
					p.HedgeDelay = retry.Constant(5 * time.Millisecond)
					p.MaxInFlight = 3
				}
				var wg sync.WaitGroup
				for i := range 20 {
					wg.Go(func() {
						_ = retry.Do(t.Context(), func(ctx context.Context) error {
							g.enter()
							defer g.leave()
							n := calls.Add(1)
							select {
							case <-time.After(time.Duration(1+i%7) * 3 * time.Millisecond):
							case <-ctx.Done():
								return ctx.Err()
							}
							if n%3 == 0 {
								return syscall.ECONNRESET
							}
							return nil
						}, p)
					})
				}
				wg.Wait()
				assert.LessOrEqual(t, g.peak.Load(), int64(3), "attempts in flight at once")
				assert.Equal(t, int64(3), g.peak.Load(), "the limit is used whole")
				assert.Zero(t, lim.InFlight(), "every slot given back")
				assert.Zero(t, lim.Waiting())
			})
		})
	}
}

// Waiters get slots in the order they came.
func TestConcurrencyLimitFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		release, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				rel, err := lim.Acquire(t.Context(), time.Time{})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				rel(time.Millisecond, nil)
			})
			synctest.Wait() // waiter i is queued before i+1 comes
		}
		assert.Equal(t, 5, lim.Waiting())
		release(0, nil)
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
		assert.Zero(t, lim.InFlight())
	})
}

// A retry that finds no slot before the deadline stops when the time to
// start it runs out, with ErrNoSlot, keeping the last attempt's error, and
// never waits past the deadline less MinAttemptTime.
func TestConcurrencyWaitBoundedByDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		hogs := make(chan func(time.Duration, error), 1)
		start := time.Now()
		err := retry.Do(ctx, func(context.Context) error {
			// Another call takes the slot as soon as this attempt gives it
			// back, and keeps it past the deadline.
			go func() {
				r, err := lim.Acquire(t.Context(), time.Time{})
				if err == nil {
					hogs <- r
				}
			}()
			synctest.Wait() // it waits for the slot
			return syscall.ECONNRESET
		}, retry.Policy{Backoff: retry.Constant(10 * time.Millisecond), Concurrency: lim, MinAttemptTime: 20 * time.Millisecond})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, retry.ErrNoSlot)
		assert.ErrorIs(t, re.Last, syscall.ECONNRESET, "the last attempt's error is kept")
		assert.Equal(t, 1, re.Attempts)
		assert.Equal(t, 80*time.Millisecond, time.Since(start), "waited until the deadline less MinAttemptTime, no longer")
		(<-hogs)(0, nil)
		assert.Zero(t, lim.InFlight())
	})
}

// A caller who gives up while waiting for a slot stops with its context's
// cause, and the slot it was waiting for is not lost.
func TestConcurrencyCallerGivesUpWhileWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		release, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancelCause(t.Context())
		cause := errors.New("the user went away")
		go func() {
			time.Sleep(30 * time.Millisecond)
			cancel(cause)
		}()
		called := false
		err = retry.Do(ctx, func(context.Context) error { called = true; return nil }, retry.Policy{Concurrency: lim})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, cause)
		assert.False(t, called)
		assert.Zero(t, lim.Waiting())
		release(0, nil)
		assert.Zero(t, lim.InFlight())
		r2, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err, "the slot is there for the next caller")
		r2(0, nil)
	})
}

// A bounded queue refuses at once when full; a negative Queue never waits.
func TestConcurrencyQueueBound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1, Queue: 1}
		release, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		go func() {
			r, err := lim.Acquire(t.Context(), time.Time{}) // the one place in the queue
			if err == nil {
				r(0, nil)
			}
		}()
		synctest.Wait()
		start := time.Now()
		err = retry.Do(t.Context(), func(context.Context) error { return nil }, retry.Policy{Concurrency: lim})
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		assert.Zero(t, time.Since(start), "refused at once")
		release(0, nil)
		synctest.Wait()
		assert.Zero(t, lim.InFlight())

		none := &retry.ConcurrencyLimit{Slots: 1, Queue: -1}
		r, err := none.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		_, err = none.Acquire(t.Context(), time.Time{})
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		r(0, nil)

		var zero retry.ConcurrencyLimit
		err = retry.Do(t.Context(), func(context.Context) error { return nil }, retry.Policy{Concurrency: &zero})
		assert.ErrorIs(t, err, retry.ErrNoSlot, "no Slots fails closed, at once")
	})
}

// A panicking attempt gives its slot back, on the caller's goroutine and in
// a hedge alike.
func TestConcurrencySlotReleasedOnPanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 2}
		assert.Panics(t, func() {
			_ = retry.Do(t.Context(), func(context.Context) error { panic("boom") }, retry.Policy{Concurrency: lim})
		})
		assert.Zero(t, lim.InFlight())
		assert.Panics(t, func() {
			_ = retry.Do(t.Context(), func(ctx context.Context) error {
				if retry.AttemptFrom(ctx) == 2 {
					panic("boom in the hedge")
				}
				<-ctx.Done()
				return ctx.Err()
			}, retry.Policy{Concurrency: lim, HedgeDelay: retry.Constant(time.Millisecond)})
		})
		assert.Zero(t, lim.InFlight())
	})
}

// news records what a Concurrency's release is told.
type news struct {
	mu   sync.Mutex
	errs []error
	lim  retry.ConcurrencyLimit
}

func (n *news) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	rel, err := n.lim.Acquire(ctx, by)
	if err != nil {
		return nil, err
	}
	return func(d time.Duration, err error) {
		n.mu.Lock()
		n.errs = append(n.errs, err)
		n.mu.Unlock()
		rel(d, err)
	}, nil
}

// A Concurrency is told of each attempt's end as the contract says: a
// retryable failure as itself, a success as nil, and an attempt that says
// nothing of the dependency (a 404-like Permanent error, a hedge cut) as
// an error that Is context.Canceled, its own error reachable.
func TestConcurrencyReleaseNews(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := &news{lim: retry.ConcurrencyLimit{Slots: 4}}
		fatal := errors.New("not found")
		i := 0
		_ = retry.Do(t.Context(), func(context.Context) error {
			i++
			if i == 1 {
				return syscall.ECONNRESET
			}
			return retry.Permanent(fatal)
		}, retry.Policy{Backoff: retry.Constant(0), Concurrency: n})
		require.Len(t, n.errs, 2)
		assert.ErrorIs(t, n.errs[0], syscall.ECONNRESET)
		assert.NotErrorIs(t, n.errs[0], context.Canceled)
		assert.ErrorIs(t, n.errs[1], context.Canceled, "a fatal error says nothing of the dependency")
		assert.ErrorIs(t, n.errs[1], fatal, "and keeps the attempt's own")

		n.errs = nil
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			if retry.AttemptFrom(ctx) == 1 {
				<-ctx.Done() // cut when the hedge wins
				return ctx.Err()
			}
			return nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Concurrency: n})
		require.NoError(t, err)
		require.Len(t, n.errs, 2)
		assert.NoError(t, n.errs[0], "the hedge won")
		assert.ErrorIs(t, n.errs[1], context.Canceled, "the cut loser")
		assert.Zero(t, n.lim.InFlight())
	})
}

// A hedge that finds no free slot does not start and ends the hedging, not
// the call: the first attempt still wins.
func TestConcurrencyHedgeNeedsAFreeSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		var attempts atomic.Int64
		start := time.Now()
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			attempts.Add(1)
			time.Sleep(50 * time.Millisecond)
			return nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Concurrency: lim})
		require.NoError(t, err)
		assert.Equal(t, int64(1), attempts.Load(), "no slot for the hedge")
		assert.Equal(t, 50*time.Millisecond, time.Since(start))
		assert.Zero(t, lim.InFlight())
	})
}

// The wait for a slot counts in Event.Waited, and WaitedFor says so when it
// was the longest part.
func TestConcurrencyWaitObserved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		release, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		time.AfterFunc(40*time.Millisecond, func() { release(0, nil) })
		var events []retry.Event
		err = retry.Do(t.Context(), func(context.Context) error { return nil },
			retry.Policy{Concurrency: lim, Observe: func(_ context.Context, e retry.Event) { events = append(events, e) }})
		require.NoError(t, err)
		require.Len(t, events, 2)
		assert.Equal(t, 40*time.Millisecond, events[0].Waited)
		assert.Equal(t, "slot", events[0].WaitedFor)
	})
}

// The slot is taken after the Limiter's booking has come, and a wait for the
// slot that makes the booking too late books again: attempts held up by a
// slot together do not start together above the rate.
func TestConcurrencyAfterBooking(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		rl := retry.RateLimiter(rate.NewLimiter(rate.Every(10*time.Millisecond), 1))
		hold, err := lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		var mu sync.Mutex
		var starts []time.Duration
		start := time.Now()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_ = retry.Do(t.Context(), func(context.Context) error {
					mu.Lock()
					starts = append(starts, time.Since(start))
					mu.Unlock()
					return nil
				}, retry.Policy{Limiter: rl, Concurrency: &retry.ConcurrencyLimit{Slots: 4}})
			})
		}
		wg.Wait()
		hold(0, nil)
		assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}, starts)

		// One slot, held 100ms: the four calls book, then wait for the
		// slot, and start as it comes back, each on a fresh booking.
		starts = nil
		hold, err = lim.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		time.AfterFunc(100*time.Millisecond, func() { hold(0, nil) })
		start = time.Now()
		for range 4 {
			wg.Go(func() {
				_ = retry.Do(t.Context(), func(context.Context) error {
					mu.Lock()
					starts = append(starts, time.Since(start))
					mu.Unlock()
					return nil
				}, retry.Policy{Limiter: rl, Concurrency: lim})
			})
		}
		wg.Wait()
		require.Len(t, starts, 4)
		for i := 1; i < len(starts); i++ {
			assert.GreaterOrEqual(t, starts[i]-starts[i-1], 10*time.Millisecond-time.Nanosecond, "starts %v keep the rate", starts)
		}
		assert.Zero(t, lim.InFlight())
	})
}

// Admit takes a slot for work run outside Do, and its done gives it back
// once, however often it is called.
func TestAdmitTakesAndGivesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &retry.ConcurrencyLimit{Slots: 1}
		p := retry.Policy{Concurrency: lim}
		done, err := p.Admit(t.Context(), time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 1, lim.InFlight())
		_, err = p.Admit(t.Context(), time.Now().Add(10*time.Millisecond))
		assert.ErrorIs(t, err, retry.ErrNoSlot, "no slot before the deadline")
		done(nil)
		done(nil)
		assert.Zero(t, lim.InFlight())
		done, err = p.Admit(t.Context(), time.Time{})
		require.NoError(t, err)
		done(syscall.ECONNRESET)
		assert.Zero(t, lim.InFlight())
	})
}

func ExampleConcurrencyLimit() {
	// At most 2 attempts in flight at once, across every call that shares
	// the policy: first attempts, retries and hedges alike.
	policy := retry.Policy{Concurrency: &retry.ConcurrencyLimit{Slots: 2}}

	var inFlight, most atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_ = retry.Do(context.Background(), func(context.Context) error {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				return nil
			}, policy)
		})
	}
	wg.Wait()
	fmt.Println("most in flight at once:", most.Load() <= 2)
	// Output: most in flight at once: true
}
