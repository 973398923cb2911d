package retry_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// slowThen returns an fn whose attempt n takes took[n-1] and returns errs[n-1]
// (nil past the end), or the context's error if that ends first.
func slowThen(took []time.Duration, errs ...error) (func(context.Context) error, *atomic.Int32) {
	var n atomic.Int32
	return func(ctx context.Context) error {
		i := int(n.Add(1)) - 1
		d := took[min(i, len(took)-1)]
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if i < len(errs) {
			return errs[i]
		}
		return nil
	}, &n
}

// recordEvents returns an Observe that records every event, and the record.
func recordEvents() (func(context.Context, retry.Event), *[]retry.Event) {
	var mu sync.Mutex
	var events []retry.Event
	return func(_ context.Context, e retry.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Done {
			e.Err = nil // keep events comparable: the *Error is checked apart
		}
		events = append(events, e)
	}, &events
}

// A slow first attempt is hedged after the delay; the hedge wins, and the
// first attempt's context is cancelled at once. Do returns when both have.
func TestHedgeWinsOverASlowAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, calls := slowThen([]time.Duration{time.Second, 5 * time.Millisecond})
		observe, events := recordEvents()
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Observe: observe})
		require.NoError(t, err)
		assert.Equal(t, 15*time.Millisecond, time.Since(start), "the hedge's answer, not the first attempt's")
		assert.Equal(t, int32(2), calls.Load())
		assert.Equal(t, []retry.Event{
			{Attempt: 2, Duration: 5 * time.Millisecond, Elapsed: 15 * time.Millisecond, Hedge: true},
			{Attempt: 1, Err: nil, Duration: 15 * time.Millisecond, Elapsed: 15 * time.Millisecond, OutcomeUnknown: true},
			{Attempt: 2, Done: true, Elapsed: 15 * time.Millisecond, OutcomeUnknown: true},
		}, clearErrs(*events, 1), "the winner, the loser, the end; a loser may have done its work")
		assert.ErrorIs(t, (*events)[1].Err, context.Canceled, "the loser was cancelled")
	})
}

// A loser that finishes its work though cancelled, and succeeds too, is an
// attempt like any other: Observe sees it, after the winner, with no Err.
func TestHedgeLoserThatSucceedsIsObserved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		fn := func(ctx context.Context) error {
			if n.Add(1) == 1 {
				time.Sleep(time.Second) // deaf to its cancellation
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			return nil
		}
		observe, events := recordEvents()
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Observe: observe})
		require.NoError(t, err)
		assert.Equal(t, time.Second, time.Since(start), "Do returns once every attempt has")
		assert.Equal(t, []retry.Event{
			{Attempt: 2, Duration: 5 * time.Millisecond, Elapsed: 15 * time.Millisecond, Hedge: true},
			{Attempt: 1, Duration: time.Second, Elapsed: time.Second},
			{Attempt: 2, Done: true, Elapsed: time.Second},
		}, *events, "the winner, the loser that succeeded too, the end")
	})
}

// clearErrs returns events with the Err of event i cleared, for comparison.
func clearErrs(events []retry.Event, i int) []retry.Event {
	out := append([]retry.Event(nil), events...)
	out[i].Err = nil
	return out
}

// A first attempt that answers before the hedge delay starts no hedge.
func TestHedgeNotNeeded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, calls := slowThen([]time.Duration{5 * time.Millisecond})
		start := time.Now()
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)}))
		assert.Equal(t, 5*time.Millisecond, time.Since(start))
		assert.Equal(t, int32(1), calls.Load())
	})
}

// Hedges start one delay after the last attempt started, up to MaxInFlight
// at once and MaxAttempts in all.
func TestHedgeLimits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var starts []time.Duration
		start := time.Now()
		fn := func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := retry.Do(ctx, fn, retry.Policy{MaxAttempts: 3, MaxInFlight: 5, HedgeDelay: retry.Constant(100 * time.Millisecond)})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, starts, "MaxAttempts counts hedges")

		starts = nil
		start = time.Now()
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err = retry.Do(ctx, fn, retry.Policy{MaxAttempts: 10, MaxInFlight: 2, HedgeDelay: retry.Constant(100 * time.Millisecond)})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond}, starts, "MaxInFlight caps the attempts in flight")
	})
}

// An error that stops the call from any attempt ends it, cancelling the
// others; the cancelled one may have done its work, so the outcome is
// unknown.
func TestHedgeStopsOnANonRetryableError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, _ := slowThen([]time.Duration{time.Second, 5 * time.Millisecond}, nil, retry.Permanent(errFlaky))
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, retry.ErrNotRetryable, re.Reason)
		assert.Equal(t, 2, re.Attempts)
		assert.True(t, re.OutcomeUnknown, "the first attempt was cut in flight")
		assert.Equal(t, 15*time.Millisecond, time.Since(start))
	})
}

// A retryable error from one attempt lets the others run; when none is left
// in flight, the call retries after its wait, and hedges that retry too.
func TestHedgeRetryableErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Hedge 2 (from 10ms) fails at 30ms: the next attempt may not start
		// before its backoff, 100ms later. Attempt 1 fails at 50ms: none is
		// left in flight, so a retry after 100ms, at 150ms, which answers.
		fn, calls := slowThen([]time.Duration{50 * time.Millisecond, 20 * time.Millisecond, 0}, errFlaky, errFlaky)
		observe, events := recordEvents()
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond),
			Backoff: retry.Constant(100 * time.Millisecond), Observe: observe})
		require.NoError(t, err)
		assert.Equal(t, 150*time.Millisecond, time.Since(start))
		assert.Equal(t, int32(3), calls.Load())
		assert.Equal(t, []retry.Event{
			{Attempt: 2, Err: errFlaky, Duration: 20 * time.Millisecond, Elapsed: 30 * time.Millisecond, Hedge: true},
			{Attempt: 1, Err: errFlaky, Duration: 50 * time.Millisecond, Elapsed: 50 * time.Millisecond,
				Retry: true, Wait: 100 * time.Millisecond, Backoff: 100 * time.Millisecond},
			{Attempt: 3, Elapsed: 150 * time.Millisecond, Waited: 100 * time.Millisecond, WaitedFor: "backoff"},
			{Attempt: 3, Done: true, Elapsed: 150 * time.Millisecond},
		}, *events)
	})
}

// startsOf returns an fn that records when each attempt starts and runs
// attempt n as do(n, ctx), and the record.
func startsOf(do func(n int, ctx context.Context) error) (func(context.Context) error, func() []time.Duration) {
	var mu sync.Mutex
	var starts []time.Duration
	start := time.Now()
	return func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, time.Since(start))
			n := len(starts)
			mu.Unlock()
			return do(n, ctx)
		}, func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), starts...)
		}
}

// sleepCtx waits d, then returns err, or the context's error if it ends
// first.
func sleepCtx(ctx context.Context, d time.Duration, err error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A retryable failure while others are in flight is replaced as a retry
// would be, once its wait has passed, without waiting for the hedge delay
// (gRFC A6: a non-fatal status sends the next hedge at once); the hedges
// after it are spaced from it by the delay.
func TestHedgeReplacesAFailedAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, starts := startsOf(func(n int, ctx context.Context) error {
			switch n {
			case 1:
				return sleepCtx(ctx, 300*time.Millisecond, nil)
			case 2:
				return sleepCtx(ctx, 20*time.Millisecond, errFlaky)
			}
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 4, MaxInFlight: 4,
			HedgeDelay: retry.Constant(100 * time.Millisecond), Backoff: retry.Constant(30 * time.Millisecond)}))
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond}, starts(),
			"hedge 2 fails at 120ms: its replacement after its 30ms backoff, the next one 100ms later")
	})
}

// A server's delay asked by an attempt that failed while another was in
// flight holds the retry that follows the other's failure too: no attempt
// starts earlier than the server asked.
func TestHedgeServerDelayHoldsTheRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, starts := startsOf(func(n int, ctx context.Context) error {
			switch n {
			case 1:
				return sleepCtx(ctx, 50*time.Millisecond, errFlaky)
			case 2:
				return retry.RetryAfter(errFlaky, 500*time.Millisecond)
			}
			return nil
		})
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 3,
			HedgeDelay: retry.Constant(10 * time.Millisecond), Backoff: retry.Constant(0)}))
		assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, 510 * time.Millisecond}, starts())
	})
}

// An attempt's end after which no attempt may start (here a server's delay
// above MaxRetryAfter) ends the hedging: the attempt in flight may still
// win, but its retryable failure starts no retry, and the call stops with
// the earlier reason.
func TestHedgeStopsForGoodOnAServerDelayAboveTheCeiling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, firstErr := range []error{nil, errFlaky} {
			fn, starts := startsOf(func(n int, ctx context.Context) error {
				if n == 1 {
					return sleepCtx(ctx, 50*time.Millisecond, firstErr)
				}
				return retry.RetryAfter(errFlaky, 10*time.Minute)
			})
			start := time.Now()
			err := retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 5,
				HedgeDelay: retry.Constant(10 * time.Millisecond), Backoff: retry.Constant(0)})
			assert.Equal(t, 50*time.Millisecond, time.Since(start))
			assert.Equal(t, []time.Duration{0, 10 * time.Millisecond}, starts())
			if firstErr == nil {
				assert.NoError(t, err, "the attempt in flight won")
				continue
			}
			var re *retry.Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, retry.ErrServerDelay, re.Reason)
			assert.Equal(t, 2, re.Attempts)
			assert.ErrorIs(t, re.Last, errFlaky)
		}
	})
}

// unrepeatable is an error that forbids a repeat of its attempt.
type unrepeatable struct{ reason error }

func (e unrepeatable) Error() string       { return "do not repeat" }
func (e unrepeatable) Unrepeatable() error { return e.reason }

// An error whose Unrepeatable method gives a reason ends the hedging, not
// the call: the attempt already in flight may still win; if it fails, the
// call stops with that reason and no retry.
func TestHedgeUnrepeatableEndsTheHedging(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, firstErr := range []error{nil, errFlaky} {
			fn, starts := startsOf(func(n int, ctx context.Context) error {
				if n == 1 {
					return sleepCtx(ctx, 50*time.Millisecond, firstErr)
				}
				return unrepeatable{retry.ErrNotIdempotent}
			})
			start := time.Now()
			err := retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 5, MaxInFlight: 5,
				HedgeDelay: retry.Constant(10 * time.Millisecond), Backoff: retry.Constant(0)})
			assert.Equal(t, 50*time.Millisecond, time.Since(start))
			assert.Equal(t, []time.Duration{0, 10 * time.Millisecond}, starts(), "no hedge after the refusal")
			if firstErr == nil {
				assert.NoError(t, err, "the attempt in flight won")
				continue
			}
			var re *retry.Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, retry.ErrNotIdempotent, re.Reason)
			assert.Equal(t, 2, re.Attempts)
		}

		// The first end that allowed no more attempts is why the call
		// stopped, though the last one's attempts ran out: hedge 3 refuses
		// at 20ms, and attempts 1 and 2 fail after it.
		fn, _ := startsOf(func(n int, ctx context.Context) error {
			if n == 3 {
				return unrepeatable{retry.ErrNotIdempotent}
			}
			return sleepCtx(ctx, 50*time.Millisecond, errFlaky)
		})
		err := retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 3, MaxInFlight: 3,
			HedgeDelay: retry.Constant(10 * time.Millisecond), Backoff: retry.Constant(0)})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, retry.ErrNotIdempotent, re.Reason)
		assert.Equal(t, 3, re.Attempts)

		// A classifier that stops on the error ends the call at once, cutting
		// the attempt in flight, whatever the error's own refusal.
		fn, starts := startsOf(func(n int, ctx context.Context) error {
			if n == 1 {
				return sleepCtx(ctx, 50*time.Millisecond, nil)
			}
			return unrepeatable{retry.ErrNotRetryable}
		})
		start := time.Now()
		err = retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond),
			Classifier: func(error) retry.Decision { return retry.Stop }})
		assert.ErrorIs(t, err, retry.ErrNotRetryable)
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		assert.Len(t, starts(), 2)
	})
}

// A hedge withdraws from the budget; a refusal ends the hedging, not the
// call, which keeps its first attempt.
func TestHedgeBudgetRefusalEndsTheHedging(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fn, calls := slowThen([]time.Duration{time.Second})
		start := time.Now()
		err := retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Budget: retry.NewBudget(0, 0)})
		require.NoError(t, err)
		assert.Equal(t, time.Second, time.Since(start), "the first attempt's own answer")
		assert.Equal(t, int32(1), calls.Load(), "no hedge without the budget's grant")
	})
}

// The Limiter paces hedges: a hedge starts at the later of its delay and its
// booking; a hedge that would not fit before the deadline never starts.
func TestHedgeLimiterAndDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &fakeLimiter{delay: 30 * time.Millisecond}
		var mu sync.Mutex
		var starts []time.Duration
		start := time.Now()
		fn := func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, time.Since(start))
			first := len(starts) == 1
			mu.Unlock()
			if first {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Limiter: lim}))
		assert.Equal(t, []time.Duration{30 * time.Millisecond, 70 * time.Millisecond}, starts,
			"the first attempt at its booking, the hedge 10ms later plus its own booking's 30ms")

		starts = nil
		start = time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		err := retry.Do(ctx, fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), MinAttemptTime: 95 * time.Millisecond})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, []time.Duration{0}, starts, "a hedge at 10ms leaves 90ms, less than MinAttemptTime")
	})
}

// A server's delay holds the next hedge until it has passed.
func TestHedgeWaitsForTheServersDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var starts []time.Duration
		start := time.Now()
		fn := func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, time.Since(start))
			n := len(starts)
			mu.Unlock()
			switch n {
			case 1:
				select {
				case <-time.After(time.Second):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			case 2:
				return retry.RetryAfter(errFlaky, 500*time.Millisecond)
			}
			<-ctx.Done()
			return ctx.Err()
		}
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 3, MaxInFlight: 3, HedgeDelay: retry.Constant(10 * time.Millisecond)}))
		assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, 510 * time.Millisecond}, starts)
	})
}

// A panic in a hedge propagates from Do once every attempt has returned.
func TestHedgePanicPropagates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var cancelled atomic.Bool
		var n atomic.Int32
		fn := func(ctx context.Context) error {
			if n.Add(1) == 2 {
				panic("boom")
			}
			<-ctx.Done()
			cancelled.Store(true)
			return ctx.Err()
		}
		assert.PanicsWithValue(t, "boom", func() {
			_ = retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		})
		assert.True(t, cancelled.Load(), "the other attempt was cancelled and had returned")
	})
}

// DoValue returns the winner's value.
func TestHedgeDoValue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		v, err := retry.DoValue(t.Context(), func(ctx context.Context) (int, error) {
			i := int(n.Add(1))
			d := 100 * time.Millisecond
			if i == 2 {
				d = 5 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return i * 10, nil
			case <-ctx.Done():
				return -1, ctx.Err()
			}
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		require.NoError(t, err)
		assert.Equal(t, 20, v, "the hedge's value")
	})
}

// learningHedge is a Hedge that records what it is told.
type learningHedge struct {
	retry.Constant
	mu   sync.Mutex
	seen []time.Duration
}

func (h *learningHedge) Learn(d time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.seen = append(h.seen, d)
	}
}

// A Hedge that learns is told of every attempt the call did not cancel.
func TestHedgeLearns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := &learningHedge{Constant: retry.Constant(10 * time.Millisecond)}
		fn, _ := slowThen([]time.Duration{time.Second, 5 * time.Millisecond})
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: h}))
		fn, _ = slowThen([]time.Duration{3 * time.Millisecond})
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{HedgeDelay: h}))
		assert.Equal(t, []time.Duration{5 * time.Millisecond, 3 * time.Millisecond}, h.seen, "the cancelled loser is not told")
	})
}
