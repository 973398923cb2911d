package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Policy says when and how [Do] retries. It is a plain value: build it once,
// share it between any number of goroutines, and pass it to Do as an
// [Option]. Do copies it and never changes it, so sharing needs no lock, as
// long as the funcs and the Budget it holds are safe for concurrent use.
//
// The zero value is the default policy: 4 attempts, [Exponential]{} backoff
// (100ms doubling to 10s, full jitter), [DefaultClassifier], no budget, no
// limiter, no per-attempt timeout, and server delays honoured up to 5 minutes.
// Each field's zero value is its default.
type Policy struct {
	// MaxAttempts counts all attempts, the first one included; 1 means no
	// retries. 0 means 4. A negative value means no limit: the caller's
	// context, the budget and the classifier still bound the loop.
	MaxAttempts int

	// Backoff gives the wait before each retry. nil means Exponential{}.
	Backoff Backoff

	// Rand supplies the uniform draw in [0, 1) that Backoff turns into a
	// wait; Do calls it once for each failed attempt. nil means
	// math/rand/v2's Float64. Set it to make a schedule reproducible in tests;
	// if the Policy is shared, Rand must be safe for concurrent use (a
	// seeded *rand.Rand is not).
	Rand func() float64

	// Classifier decides which errors are worth another attempt; Unknown
	// retries. nil means DefaultClassifier. A Classifier replaces the
	// default rules; to extend them, use Classifiers(mine, DefaultClassifier).
	Classifier Classifier

	// Budget, when set, must grant every retry (see Budget). nil means no
	// budget: each call retries up to its own limits.
	Budget Budget

	// Limiter, when set, paces every attempt, the first and the retries: each
	// is booked before its wait (a retry's for the end of its backoff), and
	// starts at the later of the backoff's end and the booking's start, on
	// the call's one timer. A wait for the limiter counts against the
	// caller's deadline, and a booking that would not fit is given back at
	// once; see [Limiter]. For a *rate.Limiter, use [RateLimiter]. A
	// Limiter that also has a method Learn(d time.Duration, err error) is
	// told, after each attempt it paced, how long the attempt took and its
	// error (nil for a success), so that it can adapt its rate (see package
	// adaptive). nil means no pacing.
	Limiter Limiter

	// AttemptTimeout, when positive, bounds each attempt: fn's context ends
	// at min(attempt start + AttemptTimeout, the caller's deadline). That
	// context also ends when fn returns, so what fn returns must not need it
	// any more (a response body still to be read, say: see retryhttp). 0
	// means only the caller's context bounds an attempt.
	AttemptTimeout time.Duration

	// MinAttemptTime is the least time an attempt needs to be useful. Do
	// starts no wait unless the attempt after it would begin at least
	// MinAttemptTime before the caller's deadline. 0 means any time left
	// will do.
	MinAttemptTime time.Duration

	// MaxRetryAfter is the longest server-requested delay (Retry-After) Do
	// will honour; a longer one stops the call at once with ErrServerDelay.
	// 0 means 5 minutes; a negative value means no ceiling (the caller's
	// deadline still applies).
	MaxRetryAfter time.Duration

	// Observe, when set, sees every step of the call, on the goroutine that
	// called Do, with the caller's context (so that a log line or a span
	// event can use it): an [Event] after each attempt, once Do has decided
	// what follows it, and a last Event, with Done set, as Do returns. With
	// Observe nil, a call costs nothing for it. Observe must not block: its
	// time counts against the wait that follows, not in addition to it.
	Observe func(context.Context, Event)

	// Hedge, when set, hedges the call: when no attempt has ended
	// Hedge.Delay(n, prev, u) after the last one started (n is 1 for the
	// first hedge, prev the delay before the last one), another attempt of
	// the same call starts beside those in flight, up to MaxInFlight at once.
	// The first success wins, and the context of every other attempt is
	// cancelled at once; Do returns when they have all returned. A failed
	// attempt is judged as without hedging: an error that is not retryable
	// ends the call at once, and a retryable one lets the others run and is
	// replaced as a retry would be: the next attempt starts once its wait
	// (its backoff, or the server's delay if longer) has passed, however
	// long the hedge delay (gRFC A6's rule for a non-fatal status), and no
	// attempt, hedge or retry, starts before the wait of every failure so
	// far has passed. An error that forbids a repeat (its Unrepeatable
	// method, see Do), and a stop for want of attempts, time or the server's
	// patience (ErrExhausted, ErrNoTimeLeft, ErrServerDelay), end the
	// hedging but not the call: no attempt starts after them, those in
	// flight may still win, and if none does, the call stops with that
	// reason. Hedges are attempts like any other: they count
	// against MaxAttempts, the Limiter paces them, each withdraws from the
	// Budget (a refused withdrawal, or a Limiter or deadline that leaves no
	// room, ends the hedging but not the call), and none starts unless it
	// fits MinAttemptTime before the deadline. Observe sees every attempt,
	// hedges marked, the winner the first without an error. A loser cancelled
	// in flight may still have done its work: if the call fails, its
	// OutcomeUnknown says so. A Hedge that also has a method
	// Learn(d time.Duration, err error) is told how each attempt ended that
	// the call did not cancel, so that its delay can follow the latencies of
	// the calls that share it (see package adaptive).
	//
	// Hedging is the only way Do starts goroutines: one per attempt, each
	// ended before Do returns, which costs a call some microseconds even
	// when its first attempt answers in time: nothing beside a network
	// call, too much for work that does no I/O. fn must then be safe for
	// concurrent calls, and must return when its context ends. A panic in
	// one attempt cancels the others, and propagates from Do once they
	// have returned.
	// Hedge only work that is safe to do twice. nil means no hedging.
	Hedge Backoff

	// MaxInFlight is the most attempts of one call in flight at once when
	// Hedge is set. 0 means 2: the first attempt and one hedge.
	MaxInFlight int

	// NumberAttempts, when true, gives fn a context that carries the
	// attempt's number, which [AttemptFrom] reads: for work that logs its
	// attempt, sets an attempt header or records a resend count. It costs
	// one allocation per call. false means fn runs on the caller's own
	// context, and AttemptFrom finds no number there.
	NumberAttempts bool

	// The size of a Policy is kept a multiple of 16 bytes: Do copies the
	// Policy out of its Option, and at 104 bytes that copy's last 16-byte
	// load straddled two of the caller's stores, which cost a first-try
	// success 20% of its time (65 ns against 76 ns, on a 2-vCPU Xeon).
	// TestPolicySize keeps it so.
	_ [8]byte
}

// Option configures a call to [Do] or [DoValue]. Options apply in order.
// A [Policy] (or a *Policy; nil means the zero Policy) is an Option, and a
// later Policy replaces an earlier one whole: fields are never merged, so
// what you pass is what runs. No Option means the zero Policy.
type Option interface {
	option()
}

func (Policy) option() {}

// Defaults of the Policy fields.
var defaultBackoff Backoff = Exponential{}

const (
	defaultMaxAttempts   = 4
	defaultMaxRetryAfter = 5 * time.Minute
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
	p := policyOf(opts)
	if p.Hedge != nil {
		_, err := runHedged(ctx, p, fn)
		return err
	}
	_, err := run(ctx, &p, fn)
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
func DoValue[T any](ctx context.Context, fn func(context.Context) (T, error), opts ...Option) (T, error) {
	var v T
	p := policyOf(opts)
	if fn == nil {
		_, err := run(ctx, &p, nil)
		return v, err
	}
	if p.Hedge != nil {
		return hedgedValue(ctx, p, fn)
	}
	_, err := run(ctx, &p, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// policyOf applies the options in order. It is a type switch, not an
// interface method taking *Policy, so that the policy stays on the stack.
func policyOf(opts []Option) Policy {
	var p Policy
	for _, o := range opts {
		switch o := o.(type) {
		case Policy:
			p = o
		case *Policy:
			p = Policy{}
			if o != nil {
				p = *o
			}
		}
	}
	return p
}

// run is the retry loop shared by Do and DoValue. It returns the number of
// the attempt that succeeded, or the call's error.
//
// It never hedges, so that fn does not escape to the heap: a hedged call
// goes to runHedged instead, chosen by the caller.
func run(ctx context.Context, p *Policy, fn func(context.Context) error) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c := call{ctx: ctx, observe: p.Observe}
	now, deadline, err := c.begin(ctx, p, fn)
	if err != nil {
		return 0, err
	}

	fctx := ctx // the context fn runs on
	var num *numbered
	if p.NumberAttempts {
		num = &numbered{Context: ctx}
		fctx = num
	}
	learn := learnerOf(p.Limiter)
	// Without hooks of the user's (Observe, a Classifier, the Budget, Rand)
	// or a Limiter, nothing between the reading of the clock after an
	// attempt and a retry at once can take time worth charging to anyone,
	// so that retry starts on that reading; with any of them, it reads the
	// clock again, so that their time is not charged to the next attempt.
	reread := c.observe != nil || p.Classifier != nil || p.Budget != nil || p.Rand != nil || p.Limiter != nil
	var prev time.Duration // the last scheduled wait, for Decorrelated
	for {
		c.attempts++
		if num != nil {
			num.n.Store(int64(c.attempts))
		}
		began := now
		var err error
		if p.AttemptTimeout > 0 {
			err = attempt(fctx, now, p.AttemptTimeout, deadline, fn)
		} else {
			err = fn(fctx) // the common case, without a call to set up
		}
		if learn != nil {
			now = time.Now()
			learn.Learn(now.Sub(began), err)
		}
		if err == nil {
			if c.observe == nil {
				return c.attempts, nil
			}
			now = time.Now()
			c.observeAttempt(began, now, nil, false, step{})
			return c.end(now, nil)
		}
		now = time.Now()
		c.last = unmark(err)
		f := inspect(err) // one walk of the error tree serves every rule
		unknown := f.outcomeUnknown()
		c.unknown = c.unknown || unknown
		if passed(ctx, now) {
			c.observeAttempt(began, now, c.last, unknown, step{})
			return c.end(now, stopCause(ctx))
		}
		u := rand.Float64
		if p.Rand != nil {
			u = p.Rand
		}
		s, reason := decide(p, c.attempts, prev, err, &f, now, deadline, u())
		after := now // when the decision was made
		if reason != nil {
			c.observeAttempt(began, now, c.last, unknown, step{server: s.server})
			return c.end(now, reason)
		}
		prev = s.wait
		at := now.Add(s.wait)

		var r Reservation
		if p.Limiter != nil {
			// A token freed during the wait needs no second wait: the
			// booking is for the end of the wait, and book has checked that
			// a later start still fits.
			if r, at, _, reason = book(ctx, p, at, deadline); reason != nil {
				c.observeAttempt(began, now, c.last, unknown, step{server: s.server})
				return c.end(time.Now(), reason)
			}
		}
		// The budget is asked last, so a retry refused for any other reason
		// costs no token.
		if p.Budget != nil && !p.Budget.Withdraw(now) {
			unbook(p, &r)
			c.observeAttempt(began, now, c.last, unknown, step{server: s.server})
			return c.end(now, ErrBudgetExhausted)
		}
		if c.observe != nil {
			s.retry, s.wait = true, max(at.Sub(now), 0)
			c.observeAttempt(began, now, c.last, unknown, s)
			c.waitFrom, c.waitBy = now, waitBy(Event{Retry: true, Wait: s.wait, Backoff: s.backoff, ServerDelay: s.server})
		}
		if reread {
			after = time.Time{}
		}
		if now, reason = c.wait(ctx, p, &r, at, after, deadline); reason != nil {
			return c.end(now, reason)
		}
	}
}

// begin starts the call: it checks the input and the caller's context,
// starts the clock, paces the first attempt (which the budget never
// refuses) and deposits in the Budget. It returns the time the first attempt
// may start and the caller's deadline, or the call's error, Observe told.
func (c *call) begin(ctx context.Context, p *Policy, fn func(context.Context) error) (now, deadline time.Time, err error) {
	if fn == nil {
		return now, deadline, c.stop(time.Time{}, errNilFunc)
	}
	if ctx.Err() != nil {
		return now, deadline, c.stop(time.Time{}, context.Cause(ctx))
	}
	start := time.Now()
	c.start = start
	deadline, _ = ctx.Deadline()
	now = start
	if p.Limiter != nil {
		c.waitFrom, c.waitBy = start, waitByLimiter
		r, at, booked, reason := book(ctx, p, now, deadline)
		if reason == nil {
			now, reason = c.wait(ctx, p, &r, at, booked, deadline)
		}
		if reason != nil {
			return now, deadline, c.stop(time.Now(), reason)
		}
	} else if !deadline.IsZero() {
		// ready's rule, for a context just found not done.
		if !now.Before(deadline) {
			return now, deadline, c.stop(now, context.DeadlineExceeded)
		}
		if !fits(now, 0, p.MinAttemptTime, deadline) {
			return now, deadline, c.stop(now, ErrNoTimeLeft)
		}
	}
	if p.Budget != nil {
		p.Budget.Deposit(now)
	}
	return now, deadline, nil
}

// book reserves the next attempt, planned for at, on p's Limiter, and
// returns the booking, the time the attempt will start (the later of at and
// the booking's Start) and the time it read after booking. It stops, giving the booking back, when that
// start would not leave MinAttemptTime before the deadline; the time the
// booking took counts. When ctx ends during a booking that needed a round
// trip, the reason is ctx's.
func book(ctx context.Context, p *Policy, at, deadline time.Time) (Reservation, time.Time, time.Time, error) {
	r, err := p.Limiter.Reserve(ctx, at)
	now := time.Now()
	if err != nil {
		if passed(ctx, now) {
			return Reservation{}, at, now, stopCause(ctx)
		}
		return Reservation{}, at, now, err
	}
	if r.Start.After(at) {
		at = r.Start
	}
	if !fits(now, at.Sub(now), p.MinAttemptTime, deadline) {
		p.Limiter.Cancel(r)
		return Reservation{}, at, now, ErrNoTimeLeft
	}
	return r, at, now, nil
}

// unbook gives r back to p's Limiter, if there is one.
func unbook(p *Policy, r *Reservation) {
	if p.Limiter != nil {
		p.Limiter.Cancel(*r)
	}
}

// wait waits on the call's one timer until at, the start of the next
// attempt, booked as r when p has a Limiter, and returns the time the
// attempt starts, or the reason not to start it, with r given back: the
// caller's context ended, or the attempt would no longer leave
// MinAttemptTime before the deadline (see ready). A wait that ends later than
// the booking's Slack allows books again from the time it woke, and waits
// for that booking: attempts held up together by a stalled process start
// spaced as the Limiter says, not together. now, if not zero, is the time
// just read, which spares a read when no wait is due.
func (c *call) wait(ctx context.Context, p *Policy, r *Reservation, at, now, deadline time.Time) (time.Time, error) {
	for {
		var ok bool
		if now, ok = c.sleepUntil(ctx, at, now); !ok {
			unbook(p, r)
			return now, stopCause(ctx)
		}
		if p.Limiter != nil && r.Slack > 0 && now.Sub(at) > r.Slack {
			p.Limiter.Cancel(*r)
			var err error
			if *r, at, now, err = book(ctx, p, now, deadline); err != nil {
				return now, err
			}
			continue
		}
		if reason := ready(ctx, p, now, deadline); reason != nil {
			unbook(p, r)
			return now, reason
		}
		return now, nil
	}
}

// ready is the one rule for every attempt, checked as it is about to start,
// after any wait and hook: the caller's context has not ended nor its
// deadline come, and MinAttemptTime fits before the deadline.
func ready(ctx context.Context, p *Policy, now, deadline time.Time) error {
	if passed(ctx, now) {
		return stopCause(ctx)
	}
	if !fits(now, 0, p.MinAttemptTime, deadline) {
		return ErrNoTimeLeft
	}
	return nil
}

// call is the state of one call to Do.
type call struct {
	ctx      context.Context // the caller's
	observe  func(context.Context, Event)
	start    time.Time
	attempts int
	last     error
	unknown  bool
	timer    *time.Timer // made on the first real wait, reused after

	// For Observe: when the wait before the next attempt began (zero when
	// no wait is pending), and what set it.
	waitFrom time.Time
	waitBy   uint8
}

// attempt runs fn once, on a context bounded by timeout. The cancel is
// deferred so that a panic in fn leaves no timer running.
func attempt(ctx context.Context, now time.Time, timeout time.Duration, deadline time.Time, fn func(context.Context) error) error {
	actx, cancel := attemptContext(ctx, now, timeout, deadline)
	if cancel == nil {
		return fn(ctx)
	}
	defer cancel()
	return fn(actx)
}

// sleepUntil waits on the call's one timer until at, and returns the time it
// woke and whether that came before ctx ended. The time is absolute, so that
// the time spent in Observe or in the limiter is part of the wait, not
// added to it. now, if not zero, is the current time, just read.
func (c *call) sleepUntil(ctx context.Context, at, now time.Time) (time.Time, bool) {
	if now.IsZero() {
		now = time.Now()
	}
	d := at.Sub(now)
	if d <= 0 {
		return now, true
	}
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	select {
	case <-c.timer.C:
		return time.Now(), true
	case <-ctx.Done():
		c.timer.Stop()
		return time.Now(), false
	}
}

// end ends the call as stop does, and returns the number of the attempt that
// succeeded (the last one made), or the error.
func (c *call) end(now time.Time, reason error) (int, error) {
	if err := c.stop(now, reason); err != nil {
		return 0, err
	}
	return c.attempts, nil
}

// stop ends the call: it builds the *Error for reason (nil for success,
// which returns nil) and tells Observe.
func (c *call) stop(now time.Time, reason error) error {
	var err error
	var elapsed time.Duration
	if !c.start.IsZero() {
		elapsed = now.Sub(c.start)
	}
	if reason != nil {
		err = &Error{
			Attempts:       c.attempts,
			Elapsed:        elapsed,
			Reason:         reason,
			Last:           c.last,
			OutcomeUnknown: c.unknown,
		}
	}
	if c.observe != nil {
		e := Event{
			Attempt:        c.attempts,
			Done:           true,
			Err:            err,
			Elapsed:        elapsed,
			Reason:         reason,
			OutcomeUnknown: c.unknown,
		}
		c.waited(&e, now)
		c.observe(c.ctx, e)
	}
	return err
}

// waited sets e's Waited to the time since the pending wait began, if one
// did, and ends it.
func (c *call) waited(e *Event, now time.Time) {
	if c.waitFrom.IsZero() {
		return
	}
	if e.Waited = max(now.Sub(c.waitFrom), 0); e.Waited > 0 {
		e.WaitedFor = waitByNames[c.waitBy]
	}
	c.waitFrom = time.Time{}
}

// observeAttempt tells Observe, if set, how an attempt that began at began
// and ended at end went, and what follows it.
func (c *call) observeAttempt(began, end time.Time, err error, unknown bool, s step) {
	if c.observe == nil {
		return
	}
	e := Event{
		Attempt:        c.attempts,
		Err:            err,
		Duration:       end.Sub(began),
		Elapsed:        end.Sub(c.start),
		Retry:          s.retry,
		Wait:           s.wait,
		Backoff:        s.backoff,
		ServerDelay:    s.server,
		OutcomeUnknown: unknown,
	}
	c.waited(&e, began)
	c.observe(c.ctx, e)
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
	s, stop := decide(&p, attempt, prev, err, &f, now, deadline, u)
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
// With [Next], it is the loop for a worker that runs one attempt at a time
// and persists the next attempt's time instead of sleeping (retryriver): Pace
// before the attempt, Next after it. Budget deposits and withdrawals stay the
// worker's.
func (p Policy) Pace(ctx context.Context, deadline time.Time) error {
	if ctx == nil {
		ctx = context.Background()
	}
	now := time.Now()
	if p.Limiter == nil {
		return ready(ctx, &p, now, deadline)
	}
	r, at, booked, err := book(ctx, &p, now, deadline)
	if err != nil {
		return err
	}
	var c call
	_, err = c.wait(ctx, &p, &r, at, booked, deadline)
	if c.timer != nil {
		c.timer.Stop()
	}
	return err
}

// step is the decision after a failed attempt, with what made it.
type step struct {
	retry   bool          // a retry follows (set by the loop, after its own checks)
	wait    time.Duration // until the next attempt
	backoff time.Duration // the policy's backoff for this retry
	server  time.Duration // the server's requested delay; 0 if none
}

// decide is Next for a non-nil err whose facts are f, with the parts of the
// wait kept apart for Observe.
func decide(p *Policy, attempt int, prev time.Duration, err error, f *facts, now, deadline time.Time, u float64) (step, error) {
	var s step
	if reason := classify(p.Classifier, err, f); reason != nil {
		return s, reason
	}
	attempt = max(attempt, 1)
	maxAttempts := p.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = defaultMaxAttempts
	}
	if maxAttempts > 0 && attempt >= maxAttempts {
		return s, ErrExhausted
	}
	b := p.Backoff
	if b == nil {
		b = defaultBackoff
	}
	// A faulty Rand must not hand a custom Backoff a u outside [0, 1).
	s.backoff = max(b.Delay(attempt, prev, unit(u)), 0)
	s.wait = s.backoff
	if s.server = max(f.delay, 0); s.server > 0 {
		ceiling := p.MaxRetryAfter
		if ceiling == 0 {
			ceiling = defaultMaxRetryAfter
		}
		if ceiling > 0 && s.server > ceiling {
			return s, ErrServerDelay
		}
		s.wait = max(s.wait, s.server)
	}
	if !fits(now, s.wait, p.MinAttemptTime, deadline) {
		return s, ErrNoTimeLeft
	}
	return s, nil
}

// Error is the error Do returns when it stops without success. It keeps why
// the loop stopped and the last attempt's error, and both are reachable
// through errors.Is and errors.As:
//
//	errors.Is(err, retry.ErrBudgetExhausted) // why it stopped
//	errors.Is(err, io.ErrUnexpectedEOF)      // what the last attempt returned
type Error struct {
	// Attempts is the number of attempts made; 0 if ctx was done first.
	Attempts int
	// Elapsed is the time from the start of the call until it stopped.
	Elapsed time.Duration
	// Reason says why the loop stopped: ErrExhausted, ErrNotRetryable,
	// ErrAlreadyRetried, ErrNotIdempotent (or another reason that the last
	// error's Unrepeatable method gave), ErrBudgetExhausted, ErrServerDelay,
	// ErrNoTimeLeft, or the caller's context.Cause(ctx). Bad input that makes any attempt impossible (a nil
	// fn, a Limiter whose burst is 0) gives an error that says so.
	Reason error
	// Last is the last attempt's error, without any Permanent or Transient
	// marker; nil if no attempt was made.
	Last error
	// OutcomeUnknown is true if any attempt ended in a way that leaves open
	// whether it took effect (see the function [OutcomeUnknown] for the
	// rules): a timeout (the attempt's, the network's, or fn's own
	// context.DeadlineExceeded), a reset or aborted connection, a broken
	// pipe, an unexpected EOF, an HTTP connection closed before the response
	// came, an HTTP/2 stream reset or a GOAWAY that covered the request, a
	// database connection lost after it was made. Then the work may
	// have been done even though Do failed: reconcile before doing it again
	// by other means. Giving up is no proof that the work was not done.
	OutcomeUnknown bool
}

// Error returns a one-line summary such as "retry: gave up after 4 attempts
// (attempts exhausted): connection reset by peer"; the text after the
// parenthesis is the last error's own.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("retry: gave up ")
	switch e.Attempts {
	case 0:
		b.WriteString("before the first attempt")
	case 1:
		b.WriteString("after 1 attempt")
	default:
		b.WriteString("after " + strconv.Itoa(e.Attempts) + " attempts")
	}
	if e.Reason != nil {
		b.WriteString(" (" + strings.TrimPrefix(e.Reason.Error(), "retry: ") + ")")
	}
	switch {
	case e.Last == nil:
	case nilPointer(e.Last):
		b.WriteString(": " + fmt.Sprintf("%T(nil)", e.Last)) // its Error method would panic
	default:
		b.WriteString(": " + e.Last.Error())
	}
	return b.String()
}

// Timeout reports whether the call stopped because its time ran out: the
// caller's deadline passed, or the next attempt would not have started
// before it ([ErrNoTimeLeft]). It is false when only the last attempt timed
// out and the call stopped for another reason. With it, a *url.Error that
// wraps a *Error answers Timeout() as it does for net/http's own timeouts.
func (e *Error) Timeout() bool { return errors.Is(e.Reason, context.DeadlineExceeded) }

// Unwrap returns the stop reason and the last error, those that are not nil.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	for _, err := range [...]error{e.Reason, e.Last} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// The reasons Do stops; see [Error.Reason].
var (
	// ErrExhausted means every attempt allowed by Policy.MaxAttempts failed.
	ErrExhausted = errors.New("retry: attempts exhausted")
	// ErrNotRetryable means the last error was marked Permanent or
	// classified Stop: by its nature, another attempt would fail the same way.
	ErrNotRetryable = errors.New("retry: error not retryable")
	// ErrAlreadyRetried means the last error came out of another retry loop
	// (a nested Do, retryhttp's Transport, or a response retryhttp gave up
	// on) and the classifier stopped on it: that inner loop has spent its
	// attempts, its budget or its time, so retrying at a second layer would
	// only multiply the load (see DefaultClassifier).
	ErrAlreadyRetried = errors.New("retry: already retried by an inner loop")
	// ErrNotIdempotent means the work is not declared safe to repeat, and the
	// last attempt failed in a way that a retry might fix but that may have
	// left the work done: a retry could do it twice. An adapter stops a call
	// with it through an error whose Unrepeatable method returns it:
	// retryhttp for a request that is not idempotent (a POST without an
	// idempotency key), retrygrpc for a call that may have reached the
	// server on a method not declared idempotent.
	ErrNotIdempotent = errors.New("retry: not declared idempotent")
	// ErrBudgetExhausted means the Policy's Budget refused the retry.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrServerDelay means the server asked for a delay above
	// Policy.MaxRetryAfter.
	ErrServerDelay = errors.New("retry: server delay above MaxRetryAfter")
	// ErrNoTimeLeft means the next attempt would not start, after its wait,
	// at least Policy.MinAttemptTime before the caller's deadline, so Do
	// stopped instead of sleeping into it. errors.Is(ErrNoTimeLeft,
	// context.DeadlineExceeded) is true.
	ErrNoTimeLeft error = noTimeLeft{}
)

type noTimeLeft struct{}

func (noTimeLeft) Error() string        { return "retry: no time left before the deadline" }
func (noTimeLeft) Is(target error) bool { return target == context.DeadlineExceeded }

var errNilFunc = errors.New("retry: nil function")
