package retryotel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

// Three calls, one of which fails twice and then succeeds: every attempt,
// wait and result is counted exactly.
func TestCountsAttemptsAndResults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Second)})
		ctx := t.Context()
		require.NoError(t, retry.Do(ctx, failing(0, nil), policy))
		require.NoError(t, retry.Do(ctx, failing(2, errReset), policy))
		require.NoError(t, retry.Do(ctx, failing(0, nil), policy))

		m := tl.collect(t)
		assert.Equal(t, map[string]int64{
			"retry.attempt.kind=original":                             2,
			"error.type=connection_reset,retry.attempt.kind=original": 1,
			"error.type=connection_reset,retry.attempt.kind=retry":    1,
			"retry.attempt.kind=retry":                                1,
		}, m.sums(t, "retry.attempts"))
		assert.Equal(t, map[string]int64{
			"retry.result=success_first_attempt": 2,
			"retry.result=success_after_retry":   1,
		}, m.sums(t, "retry.calls"))
		assert.Equal(t, map[string]hist{
			"retry.result=success_first_attempt": {Count: 2, Sum: 2},
			"retry.result=success_after_retry":   {Count: 1, Sum: 3},
		}, m.histograms(t, "retry.call.attempts"))
		// fn takes no time in the bubble: only the two 1s waits count.
		assert.Equal(t, map[string]hist{
			"retry.result=success_first_attempt": {Count: 2, Sum: 0},
			"retry.result=success_after_retry":   {Count: 1, Sum: 2},
		}, m.histograms(t, "retry.call.duration"))
		assert.Equal(t, map[string]hist{
			"retry.wait.set_by=backoff": {Count: 2, Sum: 2},
		}, m.histograms(t, "retry.wait.duration"))
		assert.NotContains(t, m, "retry.budget.balance", "no budget, no gauge")
	})
}

// Each stop reason is a result of its own, with the last error's type and
// whether the outcome is unknown.
func TestStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policy   retry.Policy
		fn       func(context.Context) error
		ctx      func(context.Context) (context.Context, context.CancelFunc)
		reason   error
		want     string // retry.calls's attributes
		attempts int
	}{
		{
			name:     "exhausted",
			policy:   retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Second)},
			fn:       always(errReset),
			reason:   retry.ErrExhausted,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=exhausted",
			attempts: 3,
		},
		{
			name:     "not retryable",
			fn:       always(retry.Permanent(errBoom)),
			reason:   retry.ErrNotRetryable,
			want:     "error.type=*errors.errorString,retry.outcome_unknown=false,retry.result=not_retryable",
			attempts: 1,
		},
		{
			name:     "budget exhausted",
			policy:   retry.Policy{Budget: retry.NewBudget(0, 0)}, // never earns a token
			fn:       always(&retry.ResponseError{StatusCode: 503}),
			reason:   retry.ErrBudgetExhausted,
			want:     "error.type=503,retry.outcome_unknown=false,retry.result=budget_exhausted",
			attempts: 1,
		},
		{
			name:     "server delay",
			policy:   retry.Policy{MaxRetryAfter: time.Minute},
			fn:       always(&retry.ResponseError{StatusCode: 429, RetryAfter: time.Hour}),
			reason:   retry.ErrServerDelay,
			want:     "error.type=429,retry.outcome_unknown=false,retry.result=server_delay",
			attempts: 1,
		},
		{
			name:   "no time left",
			policy: retry.Policy{Backoff: retry.Constant(2 * time.Second)},
			fn:     always(errReset),
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
			reason:   retry.ErrNoTimeLeft,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=no_time_left",
			attempts: 1,
		},
		{
			name:   "deadline exceeded",
			policy: retry.Policy{Backoff: retry.Constant(0)},
			fn: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, time.Second)
			},
			reason:   context.DeadlineExceeded,
			want:     "error.type=timeout,retry.outcome_unknown=true,retry.result=deadline_exceeded",
			attempts: 1,
		},
		{
			name: "canceled before the first attempt",
			fn:   always(nil),
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx, cancel
			},
			reason:   context.Canceled,
			want:     "error.type=canceled,retry.outcome_unknown=false,retry.result=canceled",
			attempts: 0,
		},
		{
			name: "already retried by an inner loop",
			fn: func(ctx context.Context) error {
				return retry.Do(ctx, always(errReset), retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
			},
			reason:   retry.ErrAlreadyRetried,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=already_retried",
			attempts: 1,
		},
		{
			name:     "not idempotent",
			fn:       always(unrepeatable{retry.ErrNotIdempotent}),
			reason:   retry.ErrNotIdempotent,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=not_idempotent",
			attempts: 1,
		},
		{
			name:     "not idempotent, said with more words",
			fn:       always(unrepeatable{fmt.Errorf("charge: %w", retry.ErrNotIdempotent)}),
			reason:   retry.ErrNotIdempotent,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=not_idempotent",
			attempts: 1,
		},
		{
			name:     "unrepeatable for a reason of the error's own",
			fn:       always(unrepeatable{errMayHaveCharged}),
			reason:   errMayHaveCharged,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=unrepeatable",
			attempts: 1,
		},
		{
			name:   "canceled with a cause",
			policy: retry.Policy{Backoff: retry.Constant(time.Second)},
			fn:     always(errReset),
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(ctx)
				time.AfterFunc(500*time.Millisecond, func() { cancel(errShutdown) })
				return ctx, func() { cancel(nil) }
			},
			reason:   errShutdown,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=canceled",
			attempts: 1,
		},
		{
			name:   "canceled with a cause that == cannot compare",
			policy: retry.Policy{Backoff: retry.Constant(time.Second)},
			fn:     always(errReset),
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(ctx)
				time.AfterFunc(500*time.Millisecond, func() { cancel(causes{errShutdown, errTooSlow}) })
				return ctx, func() { cancel(nil) }
			},
			reason:   errShutdown,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=canceled",
			attempts: 1,
		},
		{
			name:   "deadline exceeded with a cause",
			policy: retry.Policy{Backoff: retry.Constant(0)},
			fn: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeoutCause(ctx, time.Second, errTooSlow)
			},
			reason:   errTooSlow,
			want:     "error.type=timeout,retry.outcome_unknown=true,retry.result=deadline_exceeded",
			attempts: 1,
		},
		{
			// The deadline has come, the context's timer has not fired:
			// the call's reason says so, its context does not yet.
			name: "deadline passed, its timer not fired",
			fn: func(context.Context) error {
				time.Sleep(time.Second)
				return errReset
			},
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return stalledDeadline{ctx, time.Now().Add(time.Second)}, func() {}
			},
			reason:   context.DeadlineExceeded,
			want:     "error.type=connection_reset,retry.outcome_unknown=true,retry.result=deadline_exceeded",
			attempts: 1,
		},
		{
			name: "deadline passed before the first attempt, its timer not fired",
			fn:   always(nil),
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return stalledDeadline{ctx, time.Now()}, func() {}
			},
			reason:   context.DeadlineExceeded,
			want:     "error.type=timeout,retry.outcome_unknown=false,retry.result=deadline_exceeded",
			attempts: 0,
		},
		{
			name:     "nil function",
			reason:   nil, // an error that says so, not a sentinel
			want:     "error.type=*errors.errorString,retry.outcome_unknown=false,retry.result=other",
			attempts: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tl := newTelemetry(t)
				ctx, cancel := t.Context(), context.CancelFunc(func() {})
				if tt.ctx != nil {
					ctx, cancel = tt.ctx(ctx)
				}
				defer cancel()
				err := retry.Do(ctx, tt.fn, tl.instrument(tt.policy))
				require.Error(t, err)
				if tt.reason != nil {
					require.ErrorIs(t, err, tt.reason)
				}

				m := tl.collect(t)
				assert.Equal(t, map[string]int64{tt.want: 1}, m.sums(t, "retry.calls"))
				var result string
				for k := range m.histograms(t, "retry.call.attempts") {
					result = k
				}
				assert.Equal(t, map[string]hist{result: {Count: 1, Sum: float64(tt.attempts)}},
					m.histograms(t, "retry.call.attempts"))
				assert.Contains(t, tt.want, result, "the histogram's result is the counter's")
			})
		})
	}
}

var (
	errMayHaveCharged = errors.New("ledger: the card may have been charged")
	errShutdown       = errors.New("server shutting down")
	errTooSlow        = errors.New("the request took too long")
)

// unrepeatable is a connection reset, worth another attempt by its nature,
// that says its attempt must not be repeated, and why.
type unrepeatable struct{ reason error }

func (e unrepeatable) Error() string       { return "charge: " + errReset.Error() }
func (e unrepeatable) Unwrap() error       { return errReset }
func (e unrepeatable) Unrepeatable() error { return e.reason }

// causes is an error that == cannot compare: comparing two would panic.
type causes []error

func (c causes) Error() string   { return errors.Join(c...).Error() }
func (c causes) Unwrap() []error { return c }

// stalledDeadline is a context whose deadline has come while its Err is
// still nil, as a context.WithDeadline's is between its deadline and the
// moment its timer's goroutine gets to run.
type stalledDeadline struct {
	context.Context
	deadline time.Time
}

func (c stalledDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

// The wait histogram says what set each wait: the backoff, the server's
// Retry-After, or the limiter.
func TestWaitSetBy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		ctx := t.Context()

		server := tl.instrument(retry.Policy{Backoff: retry.Constant(time.Second)})
		require.NoError(t, retry.Do(ctx, failing(1, retry.RetryAfter(errBoom, 3*time.Second)), server))

		// The first attempt takes the limiter's only token; the retry waits
		// a second for the next one, longer than its backoff of 0.
		limited := tl.instrument(retry.Policy{Backoff: retry.Constant(0), Limiter: retry.RateLimiter(rate.NewLimiter(1, 1))})
		require.NoError(t, retry.Do(ctx, failing(1, errReset), limited))

		backoff := tl.instrument(retry.Policy{Backoff: retry.Constant(250 * time.Millisecond)})
		require.NoError(t, retry.Do(ctx, failing(2, errReset), backoff))

		assert.Equal(t, map[string]hist{
			"retry.wait.set_by=server":  {Count: 1, Sum: 3},
			"retry.wait.set_by=limiter": {Count: 1, Sum: 1},
			"retry.wait.set_by=backoff": {Count: 2, Sum: 0.5},
		}, tl.collect(t).histograms(t, "retry.wait.duration"))
	})
}

// retry.wait.duration records the time really waited: a 1 s wait that the
// caller cuts at 400 ms counts 0.4 s. The span event, added when the retry
// is decided, keeps the planned wait.
func TestWaitCutShortRecordsTheTimeWaited(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{Backoff: retry.Constant(time.Second)})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(400*time.Millisecond, cancel)
		ctx, span := tl.tracer.Start(ctx, "call")
		err := retry.Do(ctx, always(errReset), policy)
		span.End()
		require.ErrorIs(t, err, context.Canceled)

		m := tl.collect(t)
		assert.Equal(t, map[string]hist{"retry.wait.set_by=backoff": {Count: 1, Sum: 0.4}},
			m.histograms(t, "retry.wait.duration"))
		assert.Equal(t, map[string]hist{"retry.result=canceled": {Count: 1, Sum: 0.4}},
			m.histograms(t, "retry.call.duration"))
		events := tl.spans.Ended()[0].Events()
		require.Len(t, events, 1)
		assert.Contains(t, events[0].Attributes, attribute.Float64("retry.wait.duration", 1), "the planned wait")
	})
}

// A limiter's wait before a call's first attempt is not a retry's wait: it
// counts in retry.call.duration, not in retry.wait.duration. A limiter's
// wait before a retry counts, cut short or not.
func TestWaitBeforeTheFirstAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		limiter := rate.NewLimiter(rate.Every(time.Second), 1)
		policy := tl.instrument(retry.Policy{Backoff: retry.Constant(0), Limiter: retry.RateLimiter(limiter)})
		require.NoError(t, retry.Do(t.Context(), failing(0, nil), policy)) // the only token, at once
		require.NoError(t, retry.Do(t.Context(), failing(1, errReset), policy))

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel) // during the first attempt's wait for a token
		require.ErrorIs(t, retry.Do(ctx, failing(0, nil), policy), context.Canceled)

		m := tl.collect(t)
		assert.Equal(t, map[string]hist{"retry.wait.set_by=limiter": {Count: 1, Sum: 1}},
			m.histograms(t, "retry.wait.duration"))
		assert.Equal(t, map[string]hist{
			"retry.result=success_first_attempt": {Count: 1, Sum: 0},
			"retry.result=success_after_retry":   {Count: 1, Sum: 2}, // a second for a token, another for the next
			"retry.result=canceled":              {Count: 1, Sum: 0.5},
		}, m.histograms(t, "retry.call.duration"))
	})
}

// The budget's balance is an observable gauge, read at each collection.
func TestBudgetGauge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		budget := retry.NewBudget(0.5, 0)
		policy := tl.instrument(retry.Policy{Budget: budget, Backoff: retry.Constant(0)},
			retryotel.WithAttributes(attribute.String("peer.service", "payments")))
		ctx := t.Context()

		assert.Equal(t, map[string]float64{"peer.service=payments": 0}, tl.collect(t).gauge(t, "retry.budget.balance"))
		for range 4 {
			require.NoError(t, retry.Do(ctx, failing(0, nil), policy)) // each call earns half a token
		}
		assert.Equal(t, map[string]float64{"peer.service=payments": 2}, tl.collect(t).gauge(t, "retry.budget.balance"))
		require.NoError(t, retry.Do(ctx, failing(1, errReset), policy)) // earns 0.5, spends 1
		assert.Equal(t, map[string]float64{"peer.service=payments": 1.5}, tl.collect(t).gauge(t, "retry.budget.balance"))
	})
}

// budgetWithoutBalance is a Budget that cannot tell its balance.
type budgetWithoutBalance struct{}

func (budgetWithoutBalance) Deposit(time.Time)       {}
func (budgetWithoutBalance) Withdraw(time.Time) bool { return true }

// A budget without a Balance method, or none, registers no gauge.
func TestNoBudgetGaugeWithoutBalance(t *testing.T) {
	t.Parallel()
	tl := newTelemetry(t)
	policy := tl.instrument(retry.Policy{Budget: budgetWithoutBalance{}, Backoff: retry.Constant(0)})
	require.NoError(t, retry.Do(t.Context(), failing(1, errReset), policy))
	m := tl.collect(t)
	assert.NotContains(t, m, "retry.budget.balance")
	assert.Equal(t, map[string]int64{"retry.result=success_after_retry": 1}, m.sums(t, "retry.calls"))
}

// WithAttributes tells two policies apart in every metric.
func TestWithAttributesSeparatesPolicies(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		payments := tl.instrument(retry.Policy{Backoff: retry.Constant(time.Second)},
			retryotel.WithAttributes(attribute.String("peer.service", "payments")))
		mail := tl.instrument(retry.Policy{Backoff: retry.Constant(time.Second)},
			retryotel.WithAttributes(attribute.String("peer.service", "mail")), nil) // a nil Option is ignored
		ctx := t.Context()
		require.NoError(t, retry.Do(ctx, failing(1, errReset), payments))
		require.NoError(t, retry.Do(ctx, failing(0, nil), mail))
		require.NoError(t, retry.Do(ctx, failing(0, nil), mail))

		m := tl.collect(t)
		assert.Equal(t, map[string]int64{
			"peer.service=payments,retry.result=success_after_retry": 1,
			"peer.service=mail,retry.result=success_first_attempt":   2,
		}, m.sums(t, "retry.calls"))
		assert.Equal(t, map[string]int64{
			"error.type=connection_reset,peer.service=payments,retry.attempt.kind=original": 1,
			"peer.service=payments,retry.attempt.kind=retry":                                1,
			"peer.service=mail,retry.attempt.kind=original":                                 2,
		}, m.sums(t, "retry.attempts"))
		assert.Equal(t, map[string]hist{
			"peer.service=payments,retry.wait.set_by=backoff": {Count: 1, Sum: 1},
		}, m.histograms(t, "retry.wait.duration"))
	})
}

// The policy's own Observe is kept, and called after the event is counted.
func TestKeepsTheUsersObserve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		var seen []retry.Event
		var callsWhenDone map[string]int64
		policy := tl.instrument(retry.Policy{
			Backoff: retry.Constant(time.Second),
			Observe: func(_ context.Context, e retry.Event) {
				seen = append(seen, e)
				if e.Done {
					callsWhenDone = tl.collect(t).sums(t, "retry.calls")
				}
			},
		})
		require.NoError(t, retry.Do(t.Context(), failing(1, errReset), policy))
		require.Len(t, seen, 3)
		assert.True(t, seen[0].Retry)
		assert.Equal(t, 2, seen[1].Attempt)
		assert.True(t, seen[2].Done)
		assert.Equal(t, map[string]int64{"retry.result=success_after_retry": 1}, callsWhenDone)
	})
}

// Instrument leaves the rest of the policy as it was.
func TestInstrumentKeepsThePolicy(t *testing.T) {
	t.Parallel()
	budget := retry.NewBudget(0.1, 1)
	p := retry.Policy{MaxAttempts: 7, Backoff: retry.Constant(time.Second), Budget: budget, AttemptInContext: true}
	got := retryotel.Instrument(p, retryotel.WithMeterProvider(sdkmetric.NewMeterProvider()))
	require.NotNil(t, got.Observe)
	got.Observe = nil
	assert.Equal(t, p, got)
}

// Without WithMeterProvider, Instrument records through the global provider
// set when it is called. Not parallel: it sets the global provider, which no
// other test of this package reads.
func TestGlobalMeterProvider(t *testing.T) {
	tl := newTelemetry(t)
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(tl.meters)
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	policy := retryotel.Instrument(retry.Policy{}, retryotel.WithMeterProvider(nil)) // nil means the global one
	require.NoError(t, retry.Do(t.Context(), failing(0, nil), policy))
	assert.Equal(t, map[string]int64{"retry.result=success_first_attempt": 1},
		tl.collect(t).sums(t, "retry.calls"))
}

// An instrumented policy used by many goroutines at once counts every call.
func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	tl := newTelemetry(t)
	policy := tl.instrument(retry.Policy{Backoff: retry.Constant(0), Budget: retry.NewBudget(1, 0)})
	const goroutines, calls = 8, 50
	done := make(chan error, goroutines)
	for range goroutines {
		go func() {
			var err error
			for range calls {
				err = errors.Join(err, retry.Do(context.Background(), failing(1, errReset), policy))
			}
			done <- err
		}()
	}
	for range goroutines {
		require.NoError(t, <-done)
	}
	m := tl.collect(t)
	assert.Equal(t, map[string]int64{"retry.result=success_after_retry": goroutines * calls}, m.sums(t, "retry.calls"))
	assert.Equal(t, int64(goroutines*calls), m.sums(t, "retry.attempts")["retry.attempt.kind=retry"])
}

// typedError names its own error.type.
type typedError string

func (e typedError) Error() string     { return string(e) }
func (e typedError) ErrorType() string { return string(e) }

// Attribute sets for failures are cached up to a bound; past it, every
// failure is still counted under its own error.type.
func TestManyErrorTypes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{MaxAttempts: 1})
		const types = 300 // above the cache's bound of 256
		for round := range 2 {
			for i := range types {
				err := retry.Do(t.Context(), always(typedError(fmt.Sprint("e", i))), policy)
				require.Error(t, err, "round %d", round)
			}
		}
		attempts := tl.collect(t).sums(t, "retry.attempts")
		require.Len(t, attempts, types)
		for i := range types {
			assert.Equal(t, int64(2), attempts[fmt.Sprintf("error.type=e%d,retry.attempt.kind=original", i)], "e%d", i)
		}
	})
}

// On a real clock, a call whose attempt runs until the caller's deadline (a
// read on a socket whose deadline fn set from ctx.Deadline(), as database
// and RPC clients do) stops as the deadline comes, usually before the
// context's timer has fired: every such call is a deadline_exceeded, none
// an "other".
func TestDeadlineStopsOnARealClock(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()

	tl := newTelemetry(t)
	policy := tl.instrument(retry.Policy{})
	const goroutines, calls = 4, 50
	errs := make(chan error, goroutines)
	for range goroutines {
		go func() {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			var wrong error
			for range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				err := retry.Do(ctx, func(ctx context.Context) error {
					d, _ := ctx.Deadline()
					if err := conn.SetReadDeadline(d); err != nil {
						return err
					}
					_, err := conn.Read(make([]byte, 1))
					return err
				}, policy)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					wrong = errors.Join(wrong, fmt.Errorf("got %v, want a deadline", err))
				}
			}
			errs <- wrong
		}()
	}
	for range goroutines {
		require.NoError(t, <-errs)
	}

	results := map[string]int64{}
	for k, n := range tl.collect(t).sums(t, "retry.calls") {
		results[k[strings.Index(k, "retry.result="):]] += n
	}
	assert.Equal(t, map[string]int64{"retry.result=deadline_exceeded": goroutines * calls}, results)
}
