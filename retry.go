package retry

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"sync"
	"time"
)

// Do calls fn until it succeeds or the policy says stop, waiting between
// attempts, and returns nil or a [*Error]. fn receives the attempt's context:
// the caller's ctx, or one bounded by Policy.AttemptTimeout.
//
// After a failed attempt Do stops, in this order, when: ctx is done or its
// deadline has come (Reason is context.Cause(ctx)); the error is not
// retryable (ErrNotRetryable, or ErrAlreadyRetried when an inner retry loop
// has already retried it); the error says the attempt must not be repeated
// (see below); no attempts are left (ErrExhausted); the
// server asked for a delay above MaxRetryAfter (ErrServerDelay); the next
// attempt would not start, after the wait and any limiter delay, at least
// MinAttemptTime before ctx's deadline (ErrNoTimeLeft); or the budget refuses
// the retry (ErrBudgetExhausted). It never waits into the deadline, and a
// wait is cut short when ctx ends. If ctx is done before the first attempt,
// fn is never called. Whatever the reason, the returned *Error keeps the last
// attempt's error.
//
// Do cannot know whether fn is safe to repeat: retry only idempotent work,
// or work protected by an idempotency key. An error can say for itself that
// its attempt must not be repeated, whatever the classifier thinks of it,
// with a method Unrepeatable() error that returns the reason (nil: no
// objection): when the error is otherwise worth retrying, the call stops with
// that reason. retryhttp and retrygrpc stop a call that may have taken effect
// and is not declared idempotent this way, with [ErrNotIdempotent]. Do starts no goroutine, and a
// panic in fn propagates unchanged. A nil ctx counts as context.Background()
// and a nil fn gives an error.
func Do(ctx context.Context, fn func(context.Context) error, opts ...Option) error {
	var c callState
	c.repeats = policyInto(&c.p, opts)
	if c.p.HedgeDelay != nil && c.repeats == 0 {
		h := newHedged(fn, &c)
		_, err := runCall(ctx, &h.c, fn, h)
		return err
	}
	_, err := runCall(ctx, &c, fn, nil)
	return err
}

// DoValue is [Do] for a function that returns a value: it returns the value
// of the attempt that succeeded, or the zero T and a [*Error].
//
// The value must not need the attempt's context once fn has returned. With
// Policy.AttemptTimeout set, that context ends as fn returns, so a value
// still bound to it is cut: an *http.Response whose body is yet to be read
// fails its reads with context.Canceled, and so does a database cursor. Read
// such a value to its end inside fn and return what was read (a []byte, a
// decoded struct), or let retryhttp bound the attempt, whose AttemptTimeout
// covers only the wait for the response headers. Without AttemptTimeout, fn
// runs on the caller's context, which lives on.
//
// Of a hedged call, only the winner's value is returned. Every other value
// an attempt returned without an error (a loser that succeeded too) is
// released as the call ends, since no one else can: an [io.Closer] is
// closed, and so is the body of an *http.Response. Any other value is
// dropped; release such values inside fn, or return ones that close.
func DoValue[T any](ctx context.Context, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	var v T
	var c callState
	c.repeats = policyInto(&c.p, opts)
	if fn == nil {
		_, err := runCall(ctx, &c, nil, nil)
		return v, err
	}
	if c.p.HedgeDelay != nil && c.repeats == 0 {
		return hedgedValue(ctx, &c, fn)
	}
	_, err := runCall(ctx, &c, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	}, nil)
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// hedgedValue is DoValue for a Policy that hedges: each attempt's value is
// kept apart, the winner's is returned, and the others are released.
func hedgedValue[T any](ctx context.Context, c *callState, fn func(context.Context) (T, error)) (T, error) {
	type kept struct {
		n int
		v T
	}
	var mu sync.Mutex
	var vals []kept
	do := func(ctx context.Context) error {
		v, err := fn(ctx)
		if err == nil {
			n := AttemptFrom(ctx)
			mu.Lock()
			vals = append(vals, kept{n, v})
			mu.Unlock()
		}
		return err
	}
	h := newHedged(do, c)
	winner, err := runCall(ctx, &h.c, do, h)
	var won T
	mu.Lock()
	defer mu.Unlock()
	for _, k := range vals {
		if err == nil && k.n == winner {
			won = k.v
			continue
		}
		releaseValue(k.v)
	}
	return won, err
}

// releaseValue frees a value no one will read: an io.Closer is closed, and so is
// an *http.Response's body.
func releaseValue(v any) {
	if v == nil {
		return
	}
	if rv := reflect.ValueOf(v); (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface) && rv.IsNil() {
		return
	}
	switch v := v.(type) {
	case *http.Response:
		if v.Body != nil {
			v.Body.Close()
		}
	case io.Closer:
		v.Close()
	}
}

// Next is the decision Do takes after a failed attempt, as a pure function,
// so that a queue worker can persist the next attempt's time instead of
// sleeping. Do itself makes the same decision, so the two cannot drift.
//
// Given the policy, the 1-based attempt that just failed (below 1 counts as
// 1), prev (the wait Next returned before that attempt; 0 after the first),
// the attempt's error, the current time, the caller's deadline (zero for
// none) and a uniform draw u in [0, 1) (a value outside counts as the
// nearest end, NaN as 0), Next returns the wait before the next attempt, or
// a stop reason: [ErrNotRetryable] if err is nil, marked [Permanent] or
// classified Stop ([ErrAlreadyRetried] when it came out of another retry
// loop); the reason its Unrepeatable method gives, as in [Do];
// [ErrExhausted] if no attempts are left; [ErrServerDelay]
// if the server's requested delay is above MaxRetryAfter; [ErrNoTimeLeft] if
// the next attempt would not start MinAttemptTime before the deadline. The
// wait is max(backoff, server delay). On a stop the wait is 0.
//
// Next does not look at a context, and does not touch the Budget or the
// Limiter, which hold state: a worker that uses them calls them itself.
func Next(p Policy, attempt int, prev time.Duration, err error, now, deadline time.Time, u float64) (wait time.Duration, stop error) {
	if err == nil {
		return 0, ErrNotRetryable
	}
	f := inspect(err)
	s, stop := decideNext(&p, attempt, prev, err, &f, now, deadline, u)
	if stop != nil {
		return 0, stop
	}
	return s.wait, nil
}

// Pace waits until p's Limiter lets one attempt start, as [Do] does before
// each attempt: the attempt is booked, a booking that would not leave
// MinAttemptTime before deadline (zero for none) is given back at once, the
// wait is on one timer that ctx cuts short, and a wait that ends too late
// for its booking books again (see [Reservation].Slack). It returns nil when
// the attempt may start now, or why it may not: [ErrNoTimeLeft], the cause of
// ctx when ctx ended (its booking given back), or the Limiter's error. With
// no Limiter it only checks ctx and MinAttemptTime.
//
// Pace takes no Concurrency slot and does not ask the Breaker: a worker
// whose Policy may have them uses [Policy.Admit], which does all three.
func (p Policy) Pace(ctx context.Context, deadline time.Time) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c := callState{ctx: ctx, p: p, deadline: deadline}
	_, _, err := c.pace(time.Now())
	if c.timer != nil {
		c.timer.Stop()
	}
	return err
}

// Admit readies one attempt made outside [Do], as Do readies each of its
// own: it waits for p's Limiter as [Policy.Pace] does, then takes a slot of
// p's Concurrency and asks p's Breaker, in that order, each bounded by ctx
// and by deadline (zero for none) less MinAttemptTime. It returns done, to
// be called once the attempt has ended, with its error (nil for a
// success): done gives the slot back and tells the Breaker, judging err
// with p's Classifier as Do would; calls after the first do nothing, and
// done must not be called from two goroutines at once. Call it however the
// attempt ends, a panic included (defer it), or the slot is lost.
//
// Or Admit returns why the attempt may not start, with everything it took
// given back: the cause of ctx when ctx ended, [ErrNoTimeLeft], [ErrNoSlot],
// a reason that Is [ErrBreakerOpen] (with a method Until() time.Time that
// says when the breaker may let an attempt through: the time to schedule
// the work for), or the Limiter's or the Concurrency's own error.
//
// With [Next], it is the loop for a worker that runs one attempt at a time
// and persists the next attempt's time instead of sleeping (retryriver):
// Admit before the attempt, Next after it. Budget deposits and withdrawals
// stay the worker's.
func (p Policy) Admit(ctx context.Context, deadline time.Time) (done func(err error), reason error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c := callState{ctx: ctx, p: p, deadline: deadline}
	defer func() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}()
	now := time.Now()
	if p.Breaker != nil {
		if u := p.Breaker.Until(now); !u.IsZero() {
			return nil, breakerOpen{u}
		}
	}
	r, now, err := c.pace(now)
	if err != nil {
		return nil, err
	}
	if p.Concurrency != nil || p.Breaker != nil {
		if now, err = c.takeBounds(&r, now, false); err != nil {
			return nil, err
		}
	}
	b, began, classifier := c.b, now, p.Classifier
	return func(err error) {
		if !b.held() {
			return
		}
		end := time.Now()
		counts := false
		if err != nil && !passed(ctx, end) {
			f := inspect(err)
			counts = classify(classifier, err, &f) == nil || f.refused
		}
		b.settle(began, end, health(err, counts))
	}, nil
}
