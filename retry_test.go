package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

var errFlaky = errors.New("flaky")

// recorder is an fn that fails until a given attempt and records when each
// attempt started, relative to the start of the test.
type recorder struct {
	start   time.Time
	starts  []time.Duration
	failFor int   // attempts that fail; the next one succeeds
	err     error // what the failing attempts return
}

func newRecorder(failFor int, err error) *recorder {
	return &recorder{start: time.Now(), failFor: failFor, err: err}
}

func (r *recorder) fn(context.Context) error {
	r.starts = append(r.starts, time.Since(r.start))
	if len(r.starts) <= r.failFor {
		return r.err
	}
	return nil
}

func constantRand(u float64) func() float64 { return func() float64 { return u } }

func TestDoFirstTrySuccess(t *testing.T) {
	t.Parallel()
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error { calls++; return nil })
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
}

func TestDoDefaultsExhaustAfterFourAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(100, errFlaky)
		err := retry.Do(t.Context(), rec.fn, retry.Policy{Rand: constantRand(0.5)})

		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.Equal(t, 4, rerr.Attempts)
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.ErrorIs(t, err, errFlaky)
		assert.Same(t, errFlaky, rerr.Last)
		// Exponential{} with u = 0.5 waits half of 100ms, 200ms, 400ms.
		want := []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 350 * time.Millisecond}
		assert.Equal(t, want, rec.starts)
		assert.Equal(t, 350*time.Millisecond, rerr.Elapsed)
		assert.False(t, rerr.OutcomeUnknown)
	})
}

func TestDoSucceedsAfterRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(2, errFlaky)
		err := retry.Do(t.Context(), rec.fn, retry.Policy{Backoff: retry.Constant(time.Second)})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, rec.starts)
	})
}

func TestDoStopsBeforeWaitPastDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
			retry.Policy{Backoff: retry.Constant(time.Second)})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, retry.ErrNoTimeLeft)
		require.ErrorIs(t, err, errFlaky)
		require.Equal(t, 1, calls)
		require.Zero(t, time.Since(start)) // it gave up at once instead of sleeping into the deadline
	})
}

func TestDoMinAttemptTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		minAttempt time.Duration
		wantCalls  int
	}{
		// Deadline 1s, waits of 500ms: the retry would start at 500ms.
		{"room left", 400 * time.Millisecond, 2},
		{"exactly at the deadline is too late", 500 * time.Millisecond, 1},
		{"not enough room", 600 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				calls := 0
				err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
					retry.Policy{Backoff: retry.Constant(500 * time.Millisecond), MinAttemptTime: tt.minAttempt})
				require.ErrorIs(t, err, retry.ErrNoTimeLeft)
				assert.Equal(t, tt.wantCalls, calls, "calls")
			})
		})
	}
}

// MinAttemptTime is one rule for every attempt, checked as it is about to
// start: before the first (with or without a Limiter), and before a retry
// after the wait and after Observe, whose time may have used up the room.
func TestDoMinAttemptTimeIsOneRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		minTime   time.Duration
		hook      time.Duration // Observe's time on a retry event
		wantCalls int
	}{
		// Deadline 1s, waits of 100ms.
		{"no room for the first attempt", time.Second, 0, 0},
		{"room for the first attempt only", 950 * time.Millisecond, 0, 1},
		{"Observe uses up the room after the check before the wait", 800 * time.Millisecond, 250 * time.Millisecond, 1},
		{"room for both", 800 * time.Millisecond, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				calls := 0
				err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
					retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(100 * time.Millisecond), MinAttemptTime: tt.minTime,
						Observe: func(_ context.Context, e retry.Event) {
							if e.Retry {
								time.Sleep(tt.hook)
							}
						}})
				require.Error(t, err)
				assert.Equal(t, tt.wantCalls, calls, "calls")
				if tt.wantCalls < 2 {
					assert.ErrorIs(t, err, retry.ErrNoTimeLeft)
				}
			})
		})
	}
}

// Time spent in Observe, a Classifier or the Budget before a retry that
// needs no wait belongs to no attempt: the next attempt starts its timeout
// and its Duration when it really starts.
func TestDoRetryAtOnceReadsTheClockAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var left []time.Duration
		var durations []time.Duration
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			d, _ := ctx.Deadline()
			left = append(left, time.Until(d))
			return errFlaky
		}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), AttemptTimeout: 200 * time.Millisecond,
			Classifier: func(error) retry.Decision { time.Sleep(10 * time.Millisecond); return retry.Retry },
			Observe: func(_ context.Context, e retry.Event) {
				if !e.Done {
					durations = append(durations, e.Duration)
				}
				if e.Retry {
					time.Sleep(120 * time.Millisecond)
				}
			}})
		require.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, []time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}, left,
			"each attempt has its whole AttemptTimeout")
		assert.Equal(t, []time.Duration{0, 0, 0}, durations, "attempts that return at once take no time")
	})
}

func TestDoWaitEndingExactlyAtDeadlineStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
			retry.Policy{Backoff: retry.Constant(time.Second)})
		require.ErrorIs(t, err, retry.ErrNoTimeLeft)
		assert.Equal(t, 1, calls)
	})
}

func TestDoCancelledDuringWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		errShutdown := errors.New("shutting down")
		time.AfterFunc(1500*time.Millisecond, func() { cancel(errShutdown) })
		start := time.Now()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
			retry.Policy{Backoff: retry.Constant(time.Second), MaxAttempts: 10})

		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.Equal(t, 1500*time.Millisecond, time.Since(start), "the wait is cut short")
		assert.Equal(t, 2, calls)
		assert.Same(t, errShutdown, rerr.Reason, "Reason is context.Cause")
		assert.ErrorIs(t, err, errFlaky, "the last error is kept")
		assert.Equal(t, 1500*time.Millisecond, rerr.Elapsed)
	})
}

func TestDoContextDoneBeforeFirstAttempt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := 0
	err := retry.Do(ctx, func(context.Context) error { calls++; return nil })
	var rerr *retry.Error
	require.ErrorAs(t, err, &rerr)
	assert.Zero(t, calls)
	assert.Zero(t, rerr.Attempts)
	assert.Nil(t, rerr.Last)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "retry: gave up before the first attempt (context canceled)", err.Error())
}

func TestDoCallerContextEndsDuringAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(ctx context.Context) error {
			calls++
			<-ctx.Done()
			return ctx.Err()
		})
		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.Equal(t, 1, calls)
		assert.Equal(t, context.DeadlineExceeded, rerr.Reason)
		assert.Equal(t, context.DeadlineExceeded, rerr.Last)
		assert.True(t, rerr.OutcomeUnknown, "an attempt cut by a timeout may have taken effect")
		assert.Equal(t, time.Second, rerr.Elapsed)
	})
}

func TestDoAttemptTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		var deadlines []time.Duration
		err := retry.Do(ctx, func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			require.True(t, ok)
			deadlines = append(deadlines, d.Sub(start))
			<-ctx.Done()
			return fmt.Errorf("call: %w", ctx.Err())
		}, retry.Policy{AttemptTimeout: 2 * time.Second, Backoff: retry.Constant(time.Second), MaxAttempts: 3})

		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.ErrorIs(t, err, retry.ErrExhausted, "an attempt's own timeout is retried")
		assert.Equal(t, 3, rerr.Attempts)
		assert.True(t, rerr.OutcomeUnknown)
		// Attempts start at 0s, 3s and 6s, each bounded by 2s.
		assert.Equal(t, []time.Duration{2 * time.Second, 5 * time.Second, 8 * time.Second}, deadlines)
		assert.Equal(t, 8*time.Second, time.Since(start))
	})
}

func TestDoAttemptTimeoutBoundedByCallerDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		var deadlines []time.Duration
		err := retry.Do(ctx, func(ctx context.Context) error {
			d, _ := ctx.Deadline()
			deadlines = append(deadlines, d.Sub(start))
			<-ctx.Done()
			return ctx.Err()
		}, retry.Policy{AttemptTimeout: 2 * time.Second, Backoff: retry.Constant(0), MaxAttempts: 5})

		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		// The second attempt starts at 2s and ends with the caller's deadline at
		// 3s: the caller's context wins, so the loop stops instead of retrying.
		assert.Equal(t, []time.Duration{2 * time.Second, 3 * time.Second}, deadlines)
		assert.Equal(t, 2, rerr.Attempts)
		assert.Equal(t, context.DeadlineExceeded, rerr.Reason)
		assert.Equal(t, 3*time.Second, time.Since(start))
	})
}

func TestDoAttemptTimeoutEndingWithCallerDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Both end at 2s: the attempt's timeout must not be taken for a
		// retryable error, because the caller's deadline has come too.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(ctx context.Context) error {
			calls++
			<-ctx.Done()
			return ctx.Err()
		}, retry.Policy{AttemptTimeout: 2 * time.Second, Backoff: retry.Constant(0)})
		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.Equal(t, 1, calls)
		assert.Equal(t, context.DeadlineExceeded, rerr.Reason)
	})
}

func TestDoOwnCanceledIsNotRetried(t *testing.T) {
	t.Parallel()
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error { calls++; return context.Canceled },
		retry.Policy{Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls)
}

func TestDoObserve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			ctx context.Context
			e   retry.Event
		}
		var events []seen
		ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
		rec := newRecorder(10, retry.Transient(errFlaky))
		err := retry.Do(ctx, func(ctx context.Context) error {
			time.Sleep(10 * time.Millisecond) // each attempt takes 10ms
			return rec.fn(ctx)
		}, retry.Policy{
			MaxAttempts: 3,
			Backoff:     retry.Exponential{Base: time.Second, Jitter: retry.NoJitter},
			Observe:     func(ctx context.Context, e retry.Event) { events = append(events, seen{ctx, e}) },
		})
		require.ErrorIs(t, err, retry.ErrExhausted)
		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		want := []retry.Event{
			{Attempt: 1, Err: errFlaky, Duration: 10 * time.Millisecond, Elapsed: 10 * time.Millisecond,
				Retry: true, Wait: time.Second, Backoff: time.Second},
			{Attempt: 2, Err: errFlaky, Duration: 10 * time.Millisecond, Elapsed: 1020 * time.Millisecond,
				Retry: true, Wait: 2 * time.Second, Backoff: 2 * time.Second, Waited: time.Second, WaitedFor: "backoff"},
			{Attempt: 3, Err: errFlaky, Duration: 10 * time.Millisecond, Elapsed: 3030 * time.Millisecond,
				Waited: 2 * time.Second, WaitedFor: "backoff"},
			{Attempt: 3, Done: true, Err: rerr, Elapsed: 3030 * time.Millisecond, Reason: retry.ErrExhausted},
		}
		require.Len(t, events, len(want))
		for i, s := range events {
			assert.Equal(t, want[i], s.e, "event %d", i)
			assert.Equal(t, "caller", s.ctx.Value(ctxKey{}), "event %d has the caller's context", i)
		}
	})
}

// ctxKey marks a caller's context.
type ctxKey struct{}

func TestDoObserveSuccess(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var events []retry.Event
		observe := func(_ context.Context, e retry.Event) { events = append(events, e) }
		err := retry.Do(t.Context(), func(context.Context) error {
			time.Sleep(5 * time.Millisecond)
			return nil
		}, retry.Policy{Observe: observe})
		require.NoError(t, err)
		assert.Equal(t, []retry.Event{
			{Attempt: 1, Duration: 5 * time.Millisecond, Elapsed: 5 * time.Millisecond},
			{Attempt: 1, Done: true, Elapsed: 5 * time.Millisecond},
		}, events, "a first-try success: one attempt, then the end")
	})
}

func TestDoObserveStops(t *testing.T) {
	t.Parallel()
	errBusy := retry.RetryAfter(errFlaky, time.Hour)
	tests := []struct {
		name   string
		ctx    func(context.Context) (context.Context, context.CancelFunc)
		policy retry.Policy
		err    error
		want   []retry.Event
	}{
		{
			name:   "not retryable",
			policy: retry.Policy{},
			err:    retry.Permanent(errFlaky),
			want: []retry.Event{
				{Attempt: 1, Err: errFlaky},
				{Attempt: 1, Done: true, Reason: retry.ErrNotRetryable},
			},
		},
		{
			name:   "server delay above the ceiling",
			policy: retry.Policy{MaxRetryAfter: time.Minute},
			err:    errBusy,
			want: []retry.Event{
				{Attempt: 1, Err: errBusy, ServerDelay: time.Hour},
				{Attempt: 1, Done: true, Reason: retry.ErrServerDelay},
			},
		},
		{
			name:   "budget refuses",
			policy: retry.Policy{Budget: retry.NewBudget(0, 0), Backoff: retry.Constant(time.Second)},
			err:    errFlaky,
			want: []retry.Event{
				{Attempt: 1, Err: errFlaky},
				{Attempt: 1, Done: true, Reason: retry.ErrBudgetExhausted},
			},
		},
		{
			name: "cancelled before the first attempt",
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx, cancel
			},
			err:  errFlaky,
			want: []retry.Event{{Done: true, Reason: context.Canceled}},
		},
		{
			name: "deadline during the wait",
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 1500*time.Millisecond)
			},
			policy: retry.Policy{Backoff: retry.Constant(time.Second)},
			err:    errFlaky,
			want: []retry.Event{
				{Attempt: 1, Err: errFlaky, Retry: true, Wait: time.Second, Backoff: time.Second},
				{Attempt: 2, Err: errFlaky, Elapsed: time.Second, Waited: time.Second, WaitedFor: "backoff"},
				{Attempt: 2, Done: true, Elapsed: time.Second, Reason: retry.ErrNoTimeLeft},
			},
		},
		{
			name: "caller cancels during the wait",
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(400*time.Millisecond, cancel)
				return ctx, cancel
			},
			policy: retry.Policy{Backoff: retry.Constant(time.Second)},
			err:    errFlaky,
			want: []retry.Event{
				{Attempt: 1, Err: errFlaky, Retry: true, Wait: time.Second, Backoff: time.Second},
				{Attempt: 1, Done: true, Elapsed: 400 * time.Millisecond, Reason: context.Canceled,
					Waited: 400 * time.Millisecond, WaitedFor: "backoff"},
			},
		},
		{
			name: "the first attempt waits for the limiter",
			policy: retry.Policy{MaxAttempts: 1, Limiter: retry.RateLimiter(func() *rate.Limiter {
				lim := rate.NewLimiter(2, 1)
				lim.Allow() // the next token comes in 500ms
				return lim
			}())},
			err: errFlaky,
			want: []retry.Event{
				{Attempt: 1, Err: errFlaky, Elapsed: 500 * time.Millisecond, Waited: 500 * time.Millisecond, WaitedFor: "limiter"},
				{Attempt: 1, Done: true, Elapsed: 500 * time.Millisecond, Reason: retry.ErrExhausted},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := t.Context(), context.CancelFunc(func() {})
				if tt.ctx != nil {
					ctx, cancel = tt.ctx(ctx)
				}
				defer cancel()
				var events []retry.Event
				tt.policy.Observe = func(_ context.Context, e retry.Event) {
					if e.Done {
						e.Err = nil // checked below
					}
					events = append(events, e)
				}
				err := retry.Do(ctx, func(context.Context) error { return tt.err }, tt.policy)
				require.Error(t, err)
				assert.Equal(t, tt.want, events)
			})
		})
	}
}

func TestEventWaitSetBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    retry.Event
		want string
	}{
		{retry.Event{}, ""},
		{retry.Event{Backoff: time.Second, Wait: time.Second}, ""},
		{retry.Event{Retry: true, Backoff: time.Second, Wait: time.Second}, "backoff"},
		{retry.Event{Retry: true}, "backoff"},
		{retry.Event{Retry: true, Backoff: time.Second, ServerDelay: 2 * time.Second, Wait: 2 * time.Second}, "server"},
		{retry.Event{Retry: true, Backoff: 2 * time.Second, ServerDelay: time.Second, Wait: 2 * time.Second}, "backoff"},
		{retry.Event{Retry: true, Backoff: time.Second, ServerDelay: 2 * time.Second, Wait: 3 * time.Second}, "limiter"},
	}
	for _, tt := range tests {
		got := tt.e.WaitSetBy()
		assert.Equal(t, tt.want, got, "%+v.WaitSetBy() = %q, want %q", tt.e, got, tt.want)
	}
}

func TestDoMaxAttempts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxAttempts int
		wantCalls   int
	}{
		{"zero means 4", 0, 4},
		{"one means no retry", 1, 1},
		{"seven", 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := retry.Do(t.Context(), func(context.Context) error { calls++; return errFlaky },
				retry.Policy{MaxAttempts: tt.maxAttempts, Backoff: retry.Constant(0)})
			require.ErrorIs(t, err, retry.ErrExhausted)
			assert.Equal(t, tt.wantCalls, calls)
		})
	}
}

func TestDoNegativeMaxAttemptsRunsUntilContextEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return errFlaky },
			retry.Policy{MaxAttempts: -1, Backoff: retry.Constant(time.Second)})
		require.ErrorIs(t, err, retry.ErrNoTimeLeft)
		assert.Equal(t, 10, calls, "attempts at 0s..9s; a retry at 10s would meet the deadline")
	})
}

func TestDoLaterPolicyReplacesEarlierWhole(t *testing.T) {
	t.Parallel()
	count := func(ctx context.Context, opts ...retry.Option) int {
		calls := 0
		_ = retry.Do(ctx, func(context.Context) error { calls++; return retry.Transient(errFlaky) }, opts...)
		return calls
	}
	fast := retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)}
	three := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}
	assert.Equal(t, 2, count(t.Context(), three, fast))
	assert.Equal(t, 3, count(t.Context(), fast, &three), "a *Policy is an Option too")
	synctest.Test(t, func(t *testing.T) {
		assert.Equal(t, 4, count(t.Context(), fast, retry.Policy{}), "no field merging: the zero Policy means the defaults")
		assert.Equal(t, 4, count(t.Context(), fast, (*retry.Policy)(nil)), "a nil *Policy is the zero Policy")
	})
}

func TestDoValue(t *testing.T) {
	t.Parallel()
	calls := 0
	v, err := retry.DoValue(t.Context(), func(context.Context) (string, error) {
		calls++
		if calls < 3 {
			return "partial", errFlaky
		}
		return "done", nil
	}, retry.Policy{Backoff: retry.Constant(0)})
	require.NoError(t, err)
	assert.Equal(t, "done", v)

	v, err = retry.DoValue(t.Context(), func(context.Context) (string, error) {
		return "partial", retry.Permanent(errFlaky)
	})
	require.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.Empty(t, v, "a failed call returns the zero value")
}

func TestDoBadInput(t *testing.T) {
	t.Parallel()
	err := retry.Do(t.Context(), nil)
	var rerr *retry.Error
	require.ErrorAs(t, err, &rerr)
	assert.Zero(t, rerr.Attempts)
	assert.Contains(t, err.Error(), "nil function")

	_, err = retry.DoValue[int](t.Context(), nil)
	require.ErrorAs(t, err, &rerr)

	//lint:ignore SA1012 a nil context is bad input that must not panic
	err = retry.Do(nil, func(ctx context.Context) error { //nolint:staticcheck
		require.NotNil(t, ctx)
		return nil
	})
	assert.NoError(t, err)
}

func TestDoPanicPropagatesAndCancelsAttempt(t *testing.T) {
	t.Parallel()
	var attemptCtx context.Context
	func() {
		defer func() {
			assert.Equal(t, "boom", recover())
		}()
		_ = retry.Do(t.Context(), func(ctx context.Context) error {
			attemptCtx = ctx
			panic("boom")
		}, retry.Policy{AttemptTimeout: time.Hour})
	}()
	require.NotNil(t, attemptCtx)
	assert.ErrorIs(t, attemptCtx.Err(), context.Canceled, "the attempt's context is released")
}

func TestDoStartsNoGoroutine(t *testing.T) {
	// Not parallel: it counts the process's goroutines. Another test's
	// goroutine may end meanwhile, so the check is "no more", not "equal".
	before := runtime.NumGoroutine()
	var during []int
	err := retry.Do(context.Background(), func(context.Context) error {
		during = append(during, runtime.NumGoroutine())
		if len(during) < 3 {
			return errFlaky
		}
		return nil
	}, retry.Policy{Backoff: retry.Constant(time.Nanosecond), AttemptTimeout: time.Hour})
	require.NoError(t, err)
	require.Len(t, during, 3)
	for i, n := range during {
		assert.LessOrEqual(t, n, before, "goroutines during attempt %d", i+1)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *retry.Error
		want string
	}{
		{"exhausted", &retry.Error{Attempts: 4, Reason: retry.ErrExhausted, Last: syscall.ECONNRESET},
			"retry: gave up after 4 attempts (attempts exhausted): connection reset by peer"},
		{"one attempt", &retry.Error{Attempts: 1, Reason: retry.ErrNotRetryable, Last: io.EOF},
			"retry: gave up after 1 attempt (error not retryable): EOF"},
		{"deadline", &retry.Error{Attempts: 2, Reason: retry.ErrNoTimeLeft, Last: io.EOF},
			"retry: gave up after 2 attempts (no time left before the deadline): EOF"},
		{"context", &retry.Error{Attempts: 0, Reason: context.Canceled},
			"retry: gave up before the first attempt (context canceled)"},
		{"zero", &retry.Error{}, "retry: gave up before the first attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestErrorUnwrap(t *testing.T) {
	t.Parallel()
	err := error(&retry.Error{Attempts: 2, Reason: retry.ErrBudgetExhausted, Last: fmt.Errorf("get: %w", io.ErrUnexpectedEOF)})
	assert.ErrorIs(t, err, retry.ErrBudgetExhausted)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.NotErrorIs(t, err, retry.ErrExhausted)
	assert.Len(t, (&retry.Error{Reason: context.Canceled}).Unwrap(), 1, "a nil Last is left out")
	assert.ErrorIs(t, retry.ErrNoTimeLeft, context.DeadlineExceeded)
	assert.NotErrorIs(t, context.DeadlineExceeded, retry.ErrNoTimeLeft)
}

func TestDoOutcomeUnknownSticksAcrossAttempts(t *testing.T) {
	t.Parallel()
	errs := []error{fmt.Errorf("read: %w", syscall.ECONNRESET), &retry.ResponseError{StatusCode: 503}}
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error { calls++; return errs[calls-1] },
		retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	var rerr *retry.Error
	require.ErrorAs(t, err, &rerr)
	assert.True(t, rerr.OutcomeUnknown, "the reset on attempt 1 may have taken effect")

	err = retry.Do(t.Context(), func(context.Context) error { return syscall.ECONNREFUSED },
		retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	require.ErrorAs(t, err, &rerr)
	assert.False(t, rerr.OutcomeUnknown, "a refused connection proves nothing was sent")
}

func TestDoDecorrelatedCarriesPreviousWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(3, errFlaky)
		err := retry.Do(t.Context(), rec.fn, retry.Policy{
			Backoff: retry.Decorrelated{Base: 100 * time.Millisecond, Cap: 10 * time.Second},
			Rand:    constantRand(0.5),
		})
		require.NoError(t, err)
		// 100 + (300-100)/2 = 200; 100 + (600-100)/2 = 350; 100 + (1050-100)/2 = 575.
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{0, 200 * ms, 550 * ms, 1125 * ms}, rec.starts)
	})
}

func TestDoServerDelayIsTheNextPrev(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(2, retry.RetryAfter(errFlaky, time.Second))
		err := retry.Do(t.Context(), rec.fn, retry.Policy{
			Backoff: retry.Decorrelated{Base: 100 * time.Millisecond},
			Rand:    constantRand(0),
		})
		require.NoError(t, err)
		// Both waits are the server's 1s: with u = 0 Decorrelated gives Base.
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, rec.starts)
	})
}

func TestDoLimiterPacesEveryAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 1)
		rec := newRecorder(3, errFlaky)
		err := retry.Do(t.Context(), rec.fn, retry.Policy{Backoff: retry.Constant(600 * time.Millisecond), Limiter: retry.RateLimiter(lim)})
		require.NoError(t, err)
		// The token freed during the 600ms backoff needs no second wait: the
		// retries start after max(600ms, 1s), not 1.6s.
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, rec.starts)
	})
}

func TestDoLimiterWaitBeforeFirstAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 1)
		require.True(t, lim.Allow()) // the next token comes at 1s
		rec := newRecorder(0, nil)
		require.NoError(t, retry.Do(t.Context(), rec.fn, retry.Policy{Limiter: retry.RateLimiter(lim)}))
		assert.Equal(t, []time.Duration{time.Second}, rec.starts)
	})
}

func TestDoLimiterWaitPastDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 1)
		require.True(t, lim.Allow())
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		calls := 0
		err := retry.Do(ctx, func(context.Context) error { calls++; return nil }, retry.Policy{Limiter: retry.RateLimiter(lim)})
		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.ErrorIs(t, err, retry.ErrNoTimeLeft)
		assert.Zero(t, calls)
		assert.Zero(t, rerr.Attempts)
		assert.Zero(t, rerr.Elapsed, "it did not wait for a token it could not use")
		// The reservation was cancelled: the token is back for someone else at 1s.
		assert.InDelta(t, 1.0, lim.TokensAt(time.Now().Add(time.Second)), 1e-9)
	})
}

func TestDoLimiterReservationCancelledWhenWaitAbandoned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 1)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(300*time.Millisecond, cancel)
		err := retry.Do(ctx, func(context.Context) error { return errFlaky },
			retry.Policy{Backoff: retry.Constant(0), Limiter: retry.RateLimiter(lim)})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, errFlaky)
		// The retry's token, due at 1s, was returned when the wait was cut at 300ms.
		assert.InDelta(t, 1.0, lim.TokensAt(time.Now().Add(700*time.Millisecond)), 1e-9)
	})
}

func TestDoLimiterWithZeroBurst(t *testing.T) {
	t.Parallel()
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error { calls++; return nil },
		retry.Policy{Limiter: retry.RateLimiter(rate.NewLimiter(1, 0))})
	var rerr *retry.Error
	require.ErrorAs(t, err, &rerr)
	assert.Zero(t, calls)
	assert.Contains(t, err.Error(), "burst")
}

func TestNext(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	noJitter := retry.Exponential{Base: 100 * time.Millisecond, Cap: time.Second, Jitter: retry.NoJitter}
	tests := []struct {
		name     string
		p        retry.Policy
		attempt  int
		prev     time.Duration
		err      error
		deadline time.Time
		u        float64
		wantWait time.Duration
		wantStop error
	}{
		{"first retry, defaults, full jitter", retry.Policy{}, 1, 0, errFlaky, time.Time{}, 0.5, 50 * time.Millisecond, nil},
		{"third retry", retry.Policy{Backoff: noJitter}, 3, 0, errFlaky, time.Time{}, 0, 400 * time.Millisecond, nil},
		{"capped", retry.Policy{Backoff: noJitter, MaxAttempts: 10}, 9, 0, errFlaky, time.Time{}, 0, time.Second, nil},
		{"attempt below 1 counts as 1", retry.Policy{Backoff: noJitter}, -3, 0, errFlaky, time.Time{}, 0, 100 * time.Millisecond, nil},
		{"nil error", retry.Policy{}, 1, 0, nil, time.Time{}, 0, 0, retry.ErrNotRetryable},
		{"permanent", retry.Policy{}, 1, 0, retry.Permanent(errFlaky), time.Time{}, 0, 0, retry.ErrNotRetryable},
		{"classified stop", retry.Policy{}, 1, 0, &retry.ResponseError{StatusCode: 404}, time.Time{}, 0, 0, retry.ErrNotRetryable},
		{"exhausted", retry.Policy{}, 4, 0, errFlaky, time.Time{}, 0, 0, retry.ErrExhausted},
		{"unlimited", retry.Policy{MaxAttempts: -1, Backoff: noJitter}, 1000, 0, errFlaky, time.Time{}, 0, time.Second, nil},
		{"server delay longer", retry.Policy{Backoff: noJitter}, 1, 0, retry.RetryAfter(errFlaky, 3*time.Second), time.Time{}, 0, 3 * time.Second, nil},
		{"server delay shorter", retry.Policy{Backoff: noJitter}, 3, 0, retry.RetryAfter(errFlaky, time.Millisecond), time.Time{}, 0, 400 * time.Millisecond, nil},
		{"server delay above default ceiling", retry.Policy{}, 1, 0, retry.RetryAfter(errFlaky, 5*time.Minute+1), time.Time{}, 0, 0, retry.ErrServerDelay},
		{"server delay at the ceiling", retry.Policy{Backoff: noJitter}, 1, 0, retry.RetryAfter(errFlaky, 5*time.Minute), time.Time{}, 0, 5 * time.Minute, nil},
		{"no ceiling", retry.Policy{MaxRetryAfter: -1}, 1, 0, retry.RetryAfter(errFlaky, 1000*time.Hour), time.Time{}, 0, 1000 * time.Hour, nil},
		{"server delay past deadline", retry.Policy{}, 1, 0, retry.RetryAfter(errFlaky, 2*time.Second), now.Add(time.Second), 0, 0, retry.ErrNoTimeLeft},
		{"fits the deadline", retry.Policy{Backoff: noJitter}, 1, 0, errFlaky, now.Add(101 * time.Millisecond), 0, 100 * time.Millisecond, nil},
		{"ends at the deadline", retry.Policy{Backoff: noJitter}, 1, 0, errFlaky, now.Add(100 * time.Millisecond), 0, 0, retry.ErrNoTimeLeft},
		{"deadline passed", retry.Policy{Backoff: retry.Constant(0)}, 1, 0, errFlaky, now, 0, 0, retry.ErrNoTimeLeft},
		{"decorrelated uses prev", retry.Policy{Backoff: retry.Decorrelated{Base: 100 * time.Millisecond}}, 2, time.Second, errFlaky, time.Time{}, 0.5, 1550 * time.Millisecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, stop := retry.Next(tt.p, tt.attempt, tt.prev, tt.err, now, tt.deadline, tt.u)
			assert.Equal(t, tt.wantWait, wait, "wait")
			assert.Equal(t, tt.wantStop, stop, "stop")
		})
	}
}

// TestDoFollowsNext checks that Do's schedule is the one Next computes.
func TestDoFollowsNext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		draws := []float64{0.9, 0.1, 0.7, 0.3, 0.5, 0.2} // one per failed attempt
		i := 0
		p := retry.Policy{MaxAttempts: 6, Backoff: retry.Exponential{Base: time.Second, Cap: 5 * time.Second, Jitter: retry.EqualJitter}}
		p.Rand = func() float64 { i++; return draws[i-1] }
		rec := newRecorder(100, errFlaky)
		require.ErrorIs(t, retry.Do(t.Context(), rec.fn, p), retry.ErrExhausted)

		var want []time.Duration
		var at, prev time.Duration
		for attempt := 1; ; attempt++ {
			want = append(want, at)
			wait, stop := retry.Next(p, attempt, prev, errFlaky, time.Now(), time.Time{}, draws[attempt-1])
			if stop != nil {
				break
			}
			at += wait
			prev = wait
		}
		assert.Equal(t, want, rec.starts)
	})
}

// failing returns an fn that fails n times with a retryable error, then
// succeeds, and can be reused: it counts per call through the returned reset.
func failing(n int) (fn func(context.Context) error, reset func()) {
	calls := 0
	fn = func(context.Context) error {
		calls++
		if calls <= n {
			return errFlaky
		}
		return nil
	}
	return fn, func() { calls = 0 }
}

func TestDoAllocations(t *testing.T) {
	ctx := context.Background()
	success := func(context.Context) error { return nil }
	allocs := testing.AllocsPerRun(100, func() { _ = retry.Do(ctx, success) })
	assert.Zero(t, allocs, "first-try success")
	value := func(context.Context) (int, error) { return 1, nil }
	allocs = testing.AllocsPerRun(100, func() { _, _ = retry.DoValue(ctx, value) })
	assert.Zero(t, allocs, "first-try success of DoValue")

	zeroWait := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(0)}
	fn, reset := failing(2)
	allocs = testing.AllocsPerRun(100, func() { reset(); _ = retry.Do(ctx, fn, zeroWait) })
	assert.Zero(t, allocs, "retries with zero waits need no timer")

	tiny := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(time.Nanosecond)}
	perCall := func(failures int) float64 {
		fn, reset := failing(failures)
		return testing.AllocsPerRun(20, func() { reset(); _ = retry.Do(ctx, fn, tiny) })
	}
	two, six := perCall(2), perCall(6)
	assert.Equal(t, two, six, "allocations per call, not per attempt: the timer is reused")
	assert.LessOrEqual(t, two, 3.0)
}

func BenchmarkDirectCall(b *testing.B) {
	// The floor Do is measured against: a ctx check, the one clock read that
	// Error.Elapsed needs, and the call.
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if ctx.Err() == nil {
			_ = time.Now()
			_ = fn(ctx)
		}
	}
}

func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Exponential{Base: time.Nanosecond, Cap: time.Nanosecond}}
	b.Run("success", func(b *testing.B) {
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			_ = retry.Do(ctx, fn, policy)
		}
	})
	b.Run("success-hedged", func(b *testing.B) {
		// A hedged call whose first attempt answers long before the hedge
		// delay: what hedging costs a call that did not need it (the
		// attempt's goroutine, its context, the timer).
		fn := func(context.Context) error { return nil }
		p := policy
		p.HedgeDelay = retry.Constant(time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("success-concurrency", func(b *testing.B) {
		// A first-try success holding a slot of a fixed limit: Acquire, the
		// clock read after it, and the release.
		fn := func(context.Context) error { return nil }
		p := policy
		p.Concurrency = &retry.ConcurrencyLimit{Slots: 64}
		b.ReportAllocs()
		for b.Loop() {
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("success-breaker", func(b *testing.B) {
		// A first-try success through a closed CircuitBreaker: Allow, and the
		// done that counts the success.
		fn := func(context.Context) error { return nil }
		p := policy
		p.Breaker = &retry.CircuitBreaker{}
		b.ReportAllocs()
		for b.Loop() {
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("success-value", func(b *testing.B) {
		fn := func(context.Context) (int, error) { return 1, nil }
		b.ReportAllocs()
		for b.Loop() {
			_, _ = retry.DoValue(ctx, fn, policy)
		}
	})
	b.Run("two-failures-1ns", func(b *testing.B) {
		fn, reset := failing(2)
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Nanosecond)}
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-failures-0s", func(b *testing.B) {
		fn, reset := failing(2)
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0)}
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-failures-0s-deadline", func(b *testing.B) {
		// The same under a deadline: each failure is judged against it, on
		// a clock reading.
		fn, reset := failing(2)
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0)}
		dctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Hour))
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if err := retry.Do(dctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exhausted-0s", func(b *testing.B) {
		fn := func(context.Context) error { return errFlaky }
		p := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}
		b.ReportAllocs()
		for b.Loop() {
			_ = retry.Do(ctx, fn, p)
		}
	})
}

func BenchmarkNext(b *testing.B) {
	now := time.Now()
	p := retry.Policy{}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = retry.Next(p, 2, 0, errFlaky, now, time.Time{}, 0.5)
	}
}

// A call without a deadline or anything else that reads the time judges a
// failure without a clock reading, and its Error.Elapsed is still the time
// the call took, read as it stops.
// TestElapsedOnTheRealClock checks Error.Elapsed of a call that starts on the
// monotonic clock alone (no deadline, nothing that reads the time) against
// readings of the real clock around it and inside it, outside any bubble.
func TestElapsedOnTheRealClock(t *testing.T) {
	t.Parallel()
	var inside time.Duration
	before := time.Now()
	err := retry.Do(context.Background(), func(context.Context) error {
		began := time.Now()
		time.Sleep(time.Millisecond)
		inside += time.Since(began)
		return errFlaky
	}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
	outside := time.Since(before)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.GreaterOrEqual(t, re.Elapsed, inside, "the three attempts are inside the call")
	assert.LessOrEqual(t, re.Elapsed, outside, "the call is inside the readings around it")
}

func TestElapsedWithoutDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		err := retry.Do(context.Background(), func(context.Context) error {
			time.Sleep(10 * time.Millisecond)
			return errFlaky
		}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 3, re.Attempts)
		assert.Equal(t, 30*time.Millisecond, re.Elapsed)

		err = retry.Do(context.Background(), func(context.Context) error {
			time.Sleep(10 * time.Millisecond)
			return errFlaky
		}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(5 * time.Millisecond)})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 40*time.Millisecond, re.Elapsed, "three attempts and two waits, each wait from the end of its attempt")
	})
}
