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

// countingBudget counts deposits and withdrawals.
type countingBudget struct{ deposits, withdrawals atomic.Int64 }

func (b *countingBudget) Deposit(time.Time)       { b.deposits.Add(1) }
func (b *countingBudget) Withdraw(time.Time) bool { b.withdrawals.Add(1); return true }

// countingLimiter counts bookings.
type countingLimiter struct {
	retry.Limiter
	booked atomic.Int64
}

func (l *countingLimiter) Reserve(ctx context.Context, t time.Time) (retry.Reservation, error) {
	l.booked.Add(1)
	return l.Limiter.Reserve(ctx, t)
}

// transitions records a CircuitBreaker's changes of state.
type transitions struct {
	mu  sync.Mutex
	log []string
}

func (tr *transitions) note(from, to string, _ time.Time) {
	tr.mu.Lock()
	tr.log = append(tr.log, from+">"+to)
	tr.mu.Unlock()
}

// The breaker opens after Failures retryable failures in a row, within a
// call: the call stops at its next attempt with ErrBreakerOpen, keeping the
// last attempt's error; while open, a call stops before any attempt, with
// no deposit, no booking and no wait; after OpenFor one probe goes
// through, and its success closes the breaker.
func TestBreakerOpensStopsAndCloses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var tr transitions
		b := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Second, OnChange: tr.note}
		budget := &countingBudget{}
		lim := &countingLimiter{Limiter: retry.RateLimiter(rate.NewLimiter(rate.Inf, 1))}
		p := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(10 * time.Millisecond), Breaker: b, Budget: budget, Limiter: lim}
		down := true
		reached := 0
		fn := func(context.Context) error {
			reached++
			if down {
				return syscall.ECONNRESET
			}
			return nil
		}

		start := time.Now()
		err := retry.Do(t.Context(), fn, p)
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
		assert.ErrorIs(t, re.Last, syscall.ECONNRESET, "the last attempt's error is kept")
		assert.Equal(t, 3, re.Attempts)
		assert.Equal(t, 3, reached)
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "stopped as the third failure opened it, without waiting")
		var u interface{ Until() time.Time }
		require.ErrorAs(t, re.Reason, &u)
		assert.Equal(t, start.Add(20*time.Millisecond+time.Second), u.Until())
		assert.Equal(t, "open", b.State(time.Now()))

		// Open: the next call makes no attempt, deposits nothing, books
		// nothing and waits for nothing.
		deposits, booked := budget.deposits.Load(), lim.booked.Load()
		before := time.Now()
		err = retry.Do(t.Context(), fn, p)
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
		assert.Zero(t, re.Attempts)
		assert.Equal(t, 3, reached)
		assert.Equal(t, deposits, budget.deposits.Load(), "no deposit")
		assert.Equal(t, booked, lim.booked.Load(), "no booking")
		assert.Zero(t, time.Since(before), "no wait")

		// After OpenFor the probe goes through; the dependency is back.
		time.Sleep(time.Second)
		down = false
		require.NoError(t, retry.Do(t.Context(), fn, p))
		assert.Equal(t, "closed", b.State(time.Now()))
		assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, tr.log)
	})
}

// A probe that fails opens the breaker again for another OpenFor, and the
// half-open breaker lets only Probes attempts through at once.
func TestBreakerHalfOpenProbes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Second}
		p := retry.Policy{MaxAttempts: 1, Breaker: b}
		fail := func(context.Context) error { return syscall.ECONNRESET }
		_ = retry.Do(t.Context(), fail, p)
		require.Equal(t, "open", b.State(time.Now()))
		time.Sleep(time.Second)

		// One probe in flight; a second call meanwhile is refused.
		release := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			_ = retry.Do(t.Context(), func(context.Context) error { <-release; return syscall.ECONNRESET }, p)
		})
		synctest.Wait()
		err := retry.Do(t.Context(), func(context.Context) error { return nil }, p)
		assert.ErrorIs(t, err, retry.ErrBreakerOpen, "the one probe is out")
		close(release)
		wg.Wait()
		assert.Equal(t, "open", b.State(time.Now()), "the failed probe opened it again")
		_, until := b.Allow(time.Now())
		assert.Equal(t, time.Now().Add(time.Second), until)
	})
}

// Only failures the classifier would retry count: errors it stops on (a
// 404) and the caller's own cancel say nothing of the dependency, and a run
// of them opens nothing. A success between failures resets the run.
func TestBreakerCountsOnlyRetryableFailures(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: 3}
		once := retry.Policy{MaxAttempts: 1, Breaker: b}
		notFound := retry.Permanent(errors.New("404"))
		for range 10 {
			_ = retry.Do(t.Context(), func(context.Context) error { return notFound }, once)
		}
		for range 10 {
			ctx, cancel := context.WithCancel(t.Context())
			_ = retry.Do(ctx, func(context.Context) error { cancel(); return context.Canceled }, once)
		}
		assert.Equal(t, "closed", b.State(time.Now()))

		fail := func(context.Context) error { return syscall.ECONNRESET }
		ok := func(context.Context) error { return nil }
		for _, fn := range []func(context.Context) error{fail, fail, ok, fail, fail} {
			_ = retry.Do(t.Context(), fn, once)
		}
		assert.Equal(t, "closed", b.State(time.Now()), "the success reset the run")
		_ = retry.Do(t.Context(), func(context.Context) error { return notFound }, once)
		_ = retry.Do(t.Context(), fail, once)
		assert.Equal(t, "open", b.State(time.Now()), "a 404 neither counts nor resets: three failures in a row")
	})
}

// A failure ratio over the window opens the breaker once enough attempts
// have ended, even with no long run of failures.
func TestBreakerFailureRatio(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: -1, FailureRatio: 0.5, MinAttempts: 10, Window: 10 * time.Second}
		once := retry.Policy{MaxAttempts: 1, Breaker: b}
		fail := func(context.Context) error { return syscall.ECONNRESET }
		ok := func(context.Context) error { return nil }
		for i := range 9 {
			fn := ok
			if i%2 == 1 {
				fn = fail
			}
			_ = retry.Do(t.Context(), fn, once)
			time.Sleep(100 * time.Millisecond)
		}
		assert.Equal(t, "closed", b.State(time.Now()), "9 attempts, fewer than MinAttempts")
		_ = retry.Do(t.Context(), fail, once)
		assert.Equal(t, "open", b.State(time.Now()), "5 of 10 failed")

		// Old failures leave the window.
		b2 := &retry.CircuitBreaker{Failures: -1, FailureRatio: 0.5, MinAttempts: 4, Window: time.Second}
		p2 := retry.Policy{MaxAttempts: 1, Breaker: b2}
		_ = retry.Do(t.Context(), fail, p2)
		_ = retry.Do(t.Context(), fail, p2)
		time.Sleep(2 * time.Second)
		_ = retry.Do(t.Context(), ok, p2)
		_ = retry.Do(t.Context(), ok, p2)
		_ = retry.Do(t.Context(), fail, p2)
		_ = retry.Do(t.Context(), ok, p2)
		assert.Equal(t, "closed", b2.State(time.Now()), "1 of 4 in the window")
	})
}

// A retry planned for a time the breaker is still open stops the call at
// once, without waiting for it; a breaker that opens during a retry's wait
// stops the call at that attempt, the booking given back.
func TestBreakerStopsARetryingCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: 2, OpenFor: time.Minute}
		fail := func(context.Context) error { return syscall.ECONNRESET }
		waiting := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(100 * time.Millisecond), Breaker: b}
		var wg sync.WaitGroup
		var err error
		var reached atomic.Int64
		wg.Go(func() {
			err = retry.Do(t.Context(), func(context.Context) error { reached.Add(1); return syscall.ECONNRESET }, waiting)
		})
		synctest.Wait() // its first attempt failed; it waits 100ms
		_ = retry.Do(t.Context(), fail, retry.Policy{MaxAttempts: 1, Breaker: b})
		require.Equal(t, "open", b.State(time.Now()), "two failures in a row")
		start := time.Now()
		wg.Wait()
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
		assert.Equal(t, int64(1), reached.Load(), "its retry was refused")
		assert.Equal(t, 1, re.Attempts)
		assert.ErrorIs(t, re.Last, syscall.ECONNRESET)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "refused when its wait ended")

		start = time.Now()
		err = retry.Do(t.Context(), fail, waiting)
		assert.ErrorIs(t, err, retry.ErrBreakerOpen)
		assert.Zero(t, time.Since(start))
	})
}

// A hedge the breaker refuses does not start, and the call goes on.
func TestBreakerRefusedHedge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Minute}
		var attempts atomic.Int64
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			if attempts.Add(1) == 1 {
				// Another call fails meanwhile, and opens the breaker.
				_ = retry.Do(t.Context(), func(context.Context) error { return syscall.ECONNRESET },
					retry.Policy{MaxAttempts: 1, Breaker: b})
				time.Sleep(50 * time.Millisecond)
				return nil
			}
			return nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Breaker: b})
		require.NoError(t, err)
		assert.Equal(t, int64(1), attempts.Load(), "no hedge started")
	})
}

// Admit refuses work while the breaker is open, saying until when.
func TestAdmitBreakerOpen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &retry.CircuitBreaker{Failures: 1, OpenFor: 30 * time.Second}
		p := retry.Policy{Breaker: b}
		done, err := p.Admit(t.Context(), time.Time{})
		require.NoError(t, err)
		done(syscall.ECONNRESET)
		_, err = p.Admit(t.Context(), time.Time{})
		require.ErrorIs(t, err, retry.ErrBreakerOpen)
		var u interface{ Until() time.Time }
		require.ErrorAs(t, err, &u)
		assert.Equal(t, time.Now().Add(30*time.Second), u.Until())
	})
}

func ExampleCircuitBreaker() {
	// The breaker opens after 3 failures in a row and stays open 5s
	// (the zero value's OpenFor); while open, calls stop at once.
	breaker := &retry.CircuitBreaker{Failures: 3}
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Breaker: breaker}

	reached := 0
	down := func(context.Context) error { reached++; return syscall.ECONNREFUSED }
	for call := 1; call <= 2; call++ {
		err := retry.Do(context.Background(), down, policy)
		var re *retry.Error
		errors.As(err, &re)
		fmt.Printf("call %d: %d attempts, open: %v\n", call, re.Attempts, errors.Is(err, retry.ErrBreakerOpen))
	}
	fmt.Println("reached the dependency:", reached)
	// Output:
	// call 1: 3 attempts, open: true
	// call 2: 0 attempts, open: true
	// reached the dependency: 3
}
