package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// The loop is laid out from the top down, each file calling only those
// below it:
//
//	retry.go     Do, DoValue, Next, Pace: the API
//	loop.go      runCall: a call's attempts one at a time, on the caller's goroutine
//	hedge.go     the attempts in flight beside it once a hedge is due, on goroutines of their own
//	cut.go       the context of a hedged attempt, which the call can cut
//	schedule.go  the scheduler: every decision of a call, whoever runs its attempts
//	...          the rules it applies: classify.go, backoff.go, jitter.go, limiter.go,
//	             budget.go, concurrency.go, breaker.go, bounds.go, deadline.go,
//	             observe.go, errors.go, policy.go
//
// Sequential retries are hedging with one attempt in flight: the scheduler
// below judges the end of every attempt (judgeFailure, landAttempt), admits
// a retry (admitRetry) or plans a hedge (planHedge), and admits the planned
// attempt when its time comes (waitForNext, fireNext), for runCall and for
// hedge.go alike.

// callState is the state of one call to Do: what the scheduler knows of it.
type callState struct {
	p        Policy          // the call's own copy; first, so that its copy is aligned as the caller's
	ctx      context.Context // the caller's
	repeats  repeatRule      // what the work may bear (Sequential, Once)
	observe  func(context.Context, Event)
	events   *eventQueue   // set once the call's decisions are made off the caller's goroutine
	start    time.Time     // zero when clockless
	mono     time.Duration // when clockless, the start on the monotonic clock (see monotonicSince)
	deadline time.Time
	attempts int // attempts started
	last     error
	unknown  bool
	// clockless: the call started on mono, and reads the clock only for
	// a wait or its end (see runCall).
	clockless bool
	prev      time.Duration // the last retry wait, for Decorrelated
	timer     *time.Timer   // the call's one timer: made on the first real wait, reused after

	// For Observe: when the wait before the next attempt began (zero when
	// no wait is pending), and what set it.
	waitFrom time.Time
	waitBy   uint8

	b      bounds // what the attempt on the caller's goroutine holds of the bounds on load
	counts bool   // the last failure judged counts against the dependency's health (see health)

	h *hedgePlan // hedging's part of the schedule; nil when the call does not hedge
}

// hedgePlan is the part of a hedged call's schedule that a call without hedging
// never needs: how many attempts are in flight, and when the next one
// starts.
type hedgePlan struct {
	maxAttempts int // negative: no limit
	maxInFlight int
	inFlight    int // attempts started and not yet judged

	hedges    int           // hedges started
	hedgeWait time.Duration // the delay before the last hedge
	lastStart time.Time     // when the last attempt started
	noMore    bool          // no hedge will start any more; those in flight may still win
	ended     error         // why no attempt at all may start any more, once an attempt's end said so
	notBefore time.Time     // the waits failures earned hold the next attempt until then

	next      time.Time // when the next attempt starts; zero when none is planned
	nextRetry bool      // it is a retry (none in flight), not a hedge
	booking   Reservation
	booked    bool   // booking holds the Limiter's booking for next
	gen       uint64 // counts the plans made, so that a booking asked for an older one is given back
	asking    bool   // a hedge's booking has been asked for and has not come back
}

// verdict is what follows the end of an attempt.
type verdict struct {
	done   bool  // the call ends: with reason, or won by winner when reason is nil
	reason error // why it stopped
	winner int
	retry  bool        // a retry follows, at at, booked as r
	at     time.Time   // when the retry starts; when done, the time the call stopped
	r      Reservation // the retry's booking
}

// begin starts the call: it checks the input and the caller's context,
// starts the clock, paces the first attempt (which the budget never
// refuses) and deposits in the Budget. It returns the time the first attempt
// may start, or the call's error, Observe told. quiet says that nothing of
// the call but a deadline would read the time (see runCall's clockless);
// with no deadline either, the start is read from the monotonic clock
// alone (see monotonicSince), c.clockless is set, and begin returns a
// zero time: nothing reads it.
func (c *callState) begin(fn func(context.Context) error, quiet bool) (now time.Time, err error) {
	ctx, p := c.ctx, &c.p
	if fn == nil {
		return now, c.stopCall(time.Time{}, errNilFunc)
	}
	if ctx.Err() != nil {
		return now, c.stopCall(time.Time{}, context.Cause(ctx))
	}
	c.deadline, _ = ctx.Deadline()
	if quiet && c.deadline.IsZero() {
		// Nothing reads the start but Error.Elapsed.
		c.mono, c.clockless = monotonicSince(), true
		return time.Time{}, nil
	}
	start := time.Now()
	c.start = start
	now = start
	bounded := p.Concurrency != nil || p.Breaker != nil
	if p.Breaker != nil && (p.Limiter != nil || p.Concurrency != nil) {
		// An open breaker stops the call before it books or waits.
		if u := p.Breaker.Until(now); !u.IsZero() {
			return now, c.stopCall(now, breakerOpen{u})
		}
	}
	var r Reservation
	if p.Limiter != nil {
		c.waitFrom, c.waitBy = start, waitByLimiter
		var at, booked time.Time
		var reason error
		r, at, booked, reason = bookAttempt(ctx, p, now, c.deadline)
		if reason == nil {
			now, reason = c.waitForNext(&r, at, booked)
		}
		if reason != nil {
			return now, c.stopCall(time.Now(), reason)
		}
	} else if !c.deadline.IsZero() {
		// readyToStart's rule, for a context just found not done.
		if !now.Before(c.deadline) {
			return now, c.stopCall(now, context.DeadlineExceeded)
		}
		if !fits(now, 0, p.MinAttemptTime, c.deadline) {
			return now, c.stopCall(now, ErrNoTimeLeft)
		}
	}
	if bounded {
		var reason error
		if now, reason = c.takeBounds(&r, now, false); reason != nil {
			return now, c.stopCall(now, reason)
		}
	}
	if p.Budget != nil {
		p.Budget.Deposit(now)
	}
	return now, nil
}

// takeBounds takes what the Policy's bounds on load ask of the attempt
// about to start at now, booked as r when the Policy has a Limiter: a
// Concurrency slot first, then the Breaker's leave, into c.b. It returns
// the time the attempt starts, or the reason it does not, with everything
// it took, r included, given back. A wait for a slot that makes r too late
// (see waitForNext) books again and waits for that booking, holding the
// slot. A hedge (try) takes only a slot that is free at once, and never
// waits.
func (c *callState) takeBounds(r *Reservation, now time.Time, try bool) (time.Time, error) {
	p := &c.p
	c.b.early = true
	if p.Concurrency != nil {
		var err error
		if now, err = c.takeSlot(r, now, try); err != nil {
			return now, err
		}
	}
	if p.Breaker != nil {
		if _, ok := p.Breaker.(*CircuitBreaker); !ok {
			c.b.early = false
		}
		done, until := p.Breaker.Allow(now)
		if done == nil {
			c.b.settle(now, now, errNoNews)
			unbook(p, r)
			if until.Before(now) {
				until = now // a Breaker that refused without saying until when
			}
			return now, breakerOpen{until}
		}
		c.b.done = done
	}
	return now, nil
}

// takeSlot takes takeBounds' slot, into c.b.release, and returns the time
// the attempt starts, or why it does not, with r given back.
func (c *callState) takeSlot(r *Reservation, now time.Time, try bool) (time.Time, error) {
	p := &c.p
	if cl, ok := p.Concurrency.(*ConcurrencyLimit); ok {
		if rel := cl.tryAcquire(); rel != nil {
			// A free slot, taken at once: no wait to measure, no booking
			// made late.
			c.b.release = rel
			return now, nil
		}
	} else {
		c.b.early = false // its release may learn from the duration
	}
	by := now
	if !try {
		if by = c.deadline; !by.IsZero() {
			by = by.Add(-max(p.MinAttemptTime, 0))
		}
		if c.observe != nil && c.waitFrom.IsZero() {
			c.waitFrom, c.waitBy = now, waitBySlot
		}
	}
	release, err := p.Concurrency.Acquire(c.ctx, by)
	t := time.Now()
	if err != nil || release == nil {
		unbook(p, r)
		if passed(c.ctx, t) {
			err = stopCause(c.ctx)
		} else if err == nil {
			err = ErrNoSlot // a Concurrency that gave neither a slot nor a reason
		}
		return t, err
	}
	c.b.release = release
	if try {
		return t, nil
	}
	if c.observe != nil && t.Sub(now) > now.Sub(c.waitFrom) {
		c.waitBy = waitBySlot // the wait for the slot was the longest part
	}
	if p.Limiter != nil && tooLate(r, t) {
		if t, err = c.waitForNext(r, t, t); err != nil {
			c.b.settle(t, t, errNoNews)
			return t, err
		}
	}
	return t, nil
}

// pace readies an attempt made outside Do, about to start at now, on the
// Limiter, as Do readies its own (see Policy.Pace): it returns the booking
// and the time the attempt may start, or why it may not.
func (c *callState) pace(now time.Time) (Reservation, time.Time, error) {
	p := &c.p
	if p.Limiter == nil {
		return Reservation{}, now, readyToStart(c.ctx, p, now, c.deadline)
	}
	r, at, booked, err := bookAttempt(c.ctx, p, now, c.deadline)
	if err != nil {
		return r, now, err
	}
	now, err = c.waitForNext(&r, at, booked)
	return r, now, err
}

// draw returns the policy's source of uniform draws.
func (c *callState) draw() float64 {
	if c.p.Rand != nil {
		return c.p.Rand()
	}
	return rand.Float64()
}

// initHedging sets up the initHedging part of the schedule, in h.
func (c *callState) initHedging(h *hedgePlan) {
	p := &c.p
	*h = hedgePlan{maxAttempts: p.MaxAttempts, maxInFlight: p.MaxInFlight}
	if h.maxAttempts == 0 {
		h.maxAttempts = defaultMaxAttempts
	}
	if h.maxInFlight <= 0 {
		h.maxInFlight = 2
	}
	c.h = h
}

// markStarted records that attempt c.attempts markStarted at now.
func (c *callState) markStarted(now time.Time, hedge bool) {
	if h := c.h; h != nil {
		h.inFlight++
		h.lastStart = now
		if hedge {
			h.hedges++
		}
	}
}

// judgeFailure records the failure of an attempt at now with err, and decides what
// follows it by the policy's rules: the wait before the next attempt, or the
// reason to stop (the caller's context first), whether the error forbade a
// repeat, and whether the attempt's outcome is unknown.
func (c *callState) judgeFailure(err error, now time.Time) (s retryStep, refused, unknown bool, reason error) {
	c.last = unmark(err)
	f := inspect(err) // one walk of the error tree serves every rule
	if c.repeats == 2 && f.refusal == nil {
		f.refusal = ErrNotIdempotent // Once: no error may repeat the work
	}
	unknown = f.outcomeUnknown()
	c.unknown = c.unknown || unknown
	if passed(c.ctx, now) {
		c.counts = false // the caller gave up: no news of the dependency
		return s, false, unknown, stopCause(c.ctx)
	}
	s, reason = decideNext(&c.p, c.attempts, c.prev, err, &f, now, c.deadline, c.draw())
	// A failure the classifier would retry counts against the dependency,
	// whatever else stops the call after it.
	c.counts = reason == nil || f.refused || reason == ErrExhausted || reason == ErrServerDelay || reason == ErrNoTimeLeft
	return s, f.refused, unknown, reason
}

// landAttempt judges an attempt of a hedged call that has ended: attempt n, begun
// at began, ended at end with err, a hedge or not; now is the time of the
// judgement. A success wins the call. A failure is judged by the policy's
// rules (judgeFailure) as in any call: with no other attempt in flight, a
// retry is booked and its budget withdrawn (admitRetry); with others in flight,
// an error that stops the call ends it, one after which no attempt may start
// (attempts, time or the server's patience spent, or the error's own
// Unrepeatable reason) lets them run and starts none, and a retryable one
// lets them run and is replaced once its wait has passed.
func (c *callState) landAttempt(n int, began, end, now time.Time, hedge bool, err error) verdict {
	h := c.h
	h.inFlight--
	if err == nil {
		c.observeAttempt(n, began, end, nil, false, retryStep{}, hedge)
		return verdict{done: true, winner: n, at: now}
	}
	s, refused, unknown, reason := c.judgeFailure(err, now)
	if reason != nil && passed(c.ctx, now) { // the caller's context ended: judge's first rule
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{}, hedge)
		return verdict{done: true, reason: reason, at: now}
	}
	if reason == nil {
		// A failure earns its wait, as without hedging: no attempt starts
		// before it has passed, however many are in flight, so that a
		// failing dependency is not sent hedges faster than retries. A
		// server's delay is part of that wait.
		c.prev = s.wait
		if at := now.Add(s.wait); at.After(h.notBefore) {
			h.notBefore = at
		}
	}
	switch {
	case reason == ErrExhausted || reason == ErrNoTimeLeft || reason == ErrServerDelay || refused:
		// No attempt may start any more; those in flight may still win.
		// An error's Unrepeatable reason forbids a repeat of the work, and
		// those in flight have been sent already: cutting them would undo
		// nothing, and one may still succeed.
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
		if h.ended != nil {
			reason = h.ended // the first end that allowed no more is why the call stopped
		}
		if h.inFlight == 0 {
			return verdict{done: true, reason: reason, at: now}
		}
		if h.ended == nil {
			h.ended = reason
		}
		c.stopHedging()
		return verdict{}
	case reason != nil:
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
		return verdict{done: true, reason: reason, at: now}
	case h.inFlight > 0:
		// Others are in flight: they go on, and the failed attempt is
		// replaced as a retry would be, once its wait has passed, however
		// long the hedge delay (gRFC A6's rule for a non-fatal status).
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
		c.planHedge(true)
		return verdict{}
	case h.ended != nil:
		// An earlier attempt's end allowed no more.
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
		return verdict{done: true, reason: h.ended, at: now}
	}
	// None is in flight: a retry after its wait and every earlier failure's,
	// a server's delay from an attempt that ended before it included.
	at := now.Add(s.wait)
	if at.Before(h.notBefore) {
		at = h.notBefore
		if !fits(now, at.Sub(now), c.p.MinAttemptTime, c.deadline) {
			c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
			return verdict{done: true, reason: ErrNoTimeLeft, at: now}
		}
	}
	c.unbookNext()
	return c.admitRetry(n, began, end, hedge, unknown, s, now, at)
}

// admitRetry admits the admitRetry that follows attempt n's failure, planned for at:
// the Limiter books it (a later start, if it says so), and the Budget, asked
// last so that a admitRetry refused for any other reason costs no token, grants
// it. Observe then learns what follows the attempt.
func (c *callState) admitRetry(n int, began, end time.Time, hedge, unknown bool, s retryStep, now, at time.Time) verdict {
	p := &c.p
	if p.Breaker != nil {
		// A retry the breaker would refuse stops the call now, not after
		// its wait.
		if u := p.Breaker.Until(at); !u.IsZero() {
			c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
			return verdict{done: true, reason: breakerOpen{u}, at: now}
		}
	}
	var r Reservation
	if p.Limiter != nil {
		// A token freed during the wait needs no second wait: the booking
		// is for the end of the wait, and book has checked that a later
		// start still fits.
		var reason error
		if r, at, _, reason = bookAttempt(c.ctx, p, at, c.deadline); reason != nil {
			c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
			return verdict{done: true, reason: reason, at: time.Now()}
		}
	}
	if p.Budget != nil && !p.Budget.Withdraw(now) {
		unbook(p, &r)
		c.observeAttempt(n, began, end, c.last, unknown, retryStep{server: s.server}, hedge)
		return verdict{done: true, reason: ErrBudgetExhausted, at: now}
	}
	if c.observe != nil {
		s.retry, s.wait = true, max(at.Sub(now), 0)
		c.observeAttempt(n, began, end, c.last, unknown, s, hedge)
		c.waitFrom, c.waitBy = now, waitBy(Event{Retry: true, Wait: s.wait, Backoff: s.backoff, ServerDelay: s.server})
	}
	return verdict{retry: true, at: at, r: r}
}

// planHedge sets when the next hedge starts: a hedge delay after the last attempt
// started, or, when it replaces an attempt that failed (replace), as soon as
// that failure's wait has passed; never before the wait of any failure has
// (a server's delay above all). None when no more attempts may start or none
// is in flight to hedge.
func (c *callState) planHedge(replace bool) {
	h := c.h
	c.unbookNext()
	h.gen++
	h.next, h.nextRetry = time.Time{}, false
	if h.noMore || h.inFlight == 0 || h.inFlight >= h.maxInFlight ||
		(h.maxAttempts > 0 && c.attempts >= h.maxAttempts) {
		return
	}
	at := h.notBefore
	if !replace {
		h.hedgeWait = max(c.p.HedgeDelay.Delay(h.hedges+1, h.hedgeWait, unit(c.draw())), 0)
		if next := h.lastStart.Add(h.hedgeWait); next.After(at) {
			at = next
		}
	}
	h.next = at
}

// stopHedging ends the hedging of the call: the attempts in flight go on.
func (c *callState) stopHedging() {
	c.h.noMore = true
	c.planHedge(false)
}

// unbookNext gives back the booking for the next attempt, if there is one.
func (c *callState) unbookNext() {
	if h := c.h; h.booked {
		c.p.Limiter.Cancel(h.booking)
		h.booked = false
	}
}

// firing is what the scheduler says when the planned attempt's time has
// come.
type firing uint8

const (
	fireLater firing = iota // not yet: h.next has moved (a booking's start), or nothing is planned
	fireRetry               // start the retry now
	fireHedge               // start the hedge now
	fireBook                // the hedge needs a booking first: ask the Limiter off the loop
	fireStop                // the call stops: reason
)

// fireNext decides on the planned attempt, whose time has come: the retry, or
// the hedge once the Limiter, the deadline and the Budget allow it. A hedge
// they refuse ends the hedging, not the call. A hedge's booking is made by
// the caller of fireNext (fireBook), so that a slow Limiter never holds up the
// attempts in flight; it comes back through booked.
func (c *callState) fireNext(now time.Time) (firing, error) {
	h, p := c.h, &c.p
	if h.booked && tooLate(&h.booking, now) {
		// Too late for the booking: book again, as a retry does.
		c.unbookNext()
	}
	if h.nextRetry {
		if reason := readyToStart(c.ctx, p, now, c.deadline); reason != nil {
			return fireStop, reason
		}
		if p.Limiter != nil && !h.booked {
			// A booking given back after a late wake: book again, and wait
			// for it.
			r, at, _, reason := bookAttempt(c.ctx, p, now, c.deadline)
			if reason != nil {
				return fireStop, reason
			}
			h.booking, h.booked, h.next = r, true, at
			if at.After(now) {
				return fireLater, nil
			}
		}
		if p.Concurrency != nil || p.Breaker != nil {
			if _, reason := c.takeBounds(&h.booking, now, false); reason != nil {
				h.booked = false // given back
				return fireStop, reason
			}
		}
		h.booked = false
		h.next = time.Time{}
		return fireRetry, nil
	}
	if p.Limiter != nil && !h.booked {
		if h.asking {
			return fireLater, nil // the booking asked for earlier comes back first
		}
		h.asking = true
		return fireBook, nil
	}
	return c.admitHedge(now)
}

// hedgeBooked takes the booking of a hedge, asked for by the plan of generation
// gen (fireBook), and says what follows: the hedge starts now, or at its
// booking's start, or not at all. A booking for a plan that has changed
// since (an attempt ended meanwhile) is given back: the new plan books
// afresh when its time comes. A booking refused ends the hedging.
func (c *callState) hedgeBooked(gen uint64, r Reservation, at time.Time, err error) (firing, error) {
	h := c.h
	h.asking = false
	switch {
	case err != nil:
		if gen == h.gen {
			c.stopHedging()
		}
		return fireLater, nil
	case gen != h.gen || h.next.IsZero() || h.nextRetry:
		c.p.Limiter.Cancel(r)
		return fireLater, nil
	}
	h.booking, h.booked = r, true
	if at.After(h.next) {
		h.next = at
	}
	now := time.Now()
	if h.next.After(now) {
		return fireLater, nil // the timer fires again at the booking's start
	}
	return c.admitHedge(now)
}

// admitHedge makes the last checks of a hedge about to start: it fits
// MinAttemptTime before the deadline, and the Budget grants it.
func (c *callState) admitHedge(now time.Time) (firing, error) {
	h, p := c.h, &c.p
	if !fits(now, 0, p.MinAttemptTime, c.deadline) {
		c.stopHedging()
		return fireLater, nil
	}
	if p.Concurrency != nil || p.Breaker != nil {
		if _, reason := c.takeBounds(&h.booking, now, true); reason != nil {
			h.booked = false // given back
			c.stopHedging()
			return fireLater, nil
		}
	}
	if p.Budget != nil && !p.Budget.Withdraw(now) {
		c.b.settle(now, now, errNoNews)
		c.stopHedging()
		return fireLater, nil
	}
	h.booked = false
	h.next = time.Time{}
	return fireHedge, nil
}

// bookAttempt reserves the next attempt, planned for at, on p's Limiter, and
// returns the booking, the time the attempt will start (the later of at and
// the booking's Start) and the time it read after booking. It stops, giving
// the booking back, when that start would not leave MinAttemptTime before
// the deadline; the time the booking took counts. When ctx ends during a
// booking that needed a round trip, the reason is ctx's.
func bookAttempt(ctx context.Context, p *Policy, at, deadline time.Time) (Reservation, time.Time, time.Time, error) {
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

// waitForNext waits on the call's one timer until at, the start of the next
// attempt, booked as r when the Policy has a Limiter, and returns the time
// the attempt starts, or the reason not to start it, with r given back: the
// caller's context ended, or the attempt would no longer leave
// MinAttemptTime before the deadline (see readyToStart). now, if not zero, is the
// time just read, which spares a read when no waitForNext is due.
//
// An attempt starts on its booking only while it is no later than the
// booking's Slack after the booking's Start: attempts that start later than
// their slots, together, would start in a burst above the limit. So a
// booking whose Start is further ahead of at than its Slack (a retry whose
// waitForNext is longer than a Limiter books ahead, a booking granted at once for
// a retry that waits) is given back at once, while its slot can still serve
// another call, and the attempt books again when its waitForNext is over; and a
// waitForNext that ends later than the Slack allows (a stalled process) books
// again from the time it woke. Either way it then waits for that booking:
// calls that failed together and waitForNext alike (a constant backoff, a server's
// Retry-After) start spaced as the Limiter says, not together. The deadline
// was checked from the planned time when the retry was decided.
func (c *callState) waitForNext(r *Reservation, at, now time.Time) (time.Time, error) {
	ctx, p := c.ctx, &c.p
	held := p.Limiter != nil // r is a booking to give back if the attempt will not start
	if held && tooLate(r, at) {
		p.Limiter.Cancel(*r)
		held = false
	}
	for {
		var ok bool
		if now, ok = c.sleepUntil(at, now); !ok {
			if held {
				p.Limiter.Cancel(*r)
			}
			return now, stopCause(ctx)
		}
		if p.Limiter != nil && (!held || tooLate(r, now)) {
			if held {
				p.Limiter.Cancel(*r)
			}
			var err error
			if *r, at, now, err = bookAttempt(ctx, p, now, c.deadline); err != nil {
				return now, err
			}
			held = true
			if !tooLate(r, at) {
				continue // wait for the new booking's start, if it is later
			}
		}
		if reason := readyToStart(ctx, p, now, c.deadline); reason != nil {
			if held {
				p.Limiter.Cancel(*r)
			}
			return now, reason
		}
		return now, nil
	}
}

// tooLate reports whether an attempt that starts at t is later than booking r
// allows: more than its Slack after its Start. A Slack of 0 holds however
// tooLate.
func tooLate(r *Reservation, t time.Time) bool {
	return r.Slack > 0 && t.Sub(r.Start) > r.Slack
}

// sleepUntil waits on the call's one timer until at, and returns the time it
// woke and whether that came before the caller's context ended. The time is
// absolute, so that the time spent in Observe or in the limiter is part of
// the wait, not added to it. now, if not zero, is the current time, just
// read; a wait that seems due from it is measured again from a fresh
// reading, so that a wait shorter than the work since that reading (a
// nanosecond's backoff) needs no timer.
func (c *callState) sleepUntil(at, now time.Time) (time.Time, bool) {
	if now.IsZero() || at.After(now) {
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
	case <-c.ctx.Done():
		c.timer.Stop()
		return time.Now(), false
	}
}

// readyToStart is the one rule for every attempt, checked as it is about to start,
// after any wait and hook: the caller's context has not ended nor its
// deadline come, and MinAttemptTime fits before the deadline.
func readyToStart(ctx context.Context, p *Policy, now, deadline time.Time) error {
	if passed(ctx, now) {
		return stopCause(ctx)
	}
	if !fits(now, 0, p.MinAttemptTime, deadline) {
		return ErrNoTimeLeft
	}
	return nil
}

// endCall ends the call as stop does, and returns the number of the attempt that
// succeeded (the last one made), or the error.
func (c *callState) endCall(now time.Time, reason error) (int, error) {
	if err := c.stopCall(now, reason); err != nil {
		return 0, err
	}
	return c.attempts, nil
}

// stopCall ends the call: it builds the *Error for reason (nil for success,
// which returns nil) and tells Observe.
func (c *callState) stopCall(now time.Time, reason error) error {
	var err error
	var elapsed time.Duration
	if !c.start.IsZero() {
		elapsed = now.Sub(c.start)
	} else if c.clockless {
		elapsed = now.Sub(epoch) - c.mono
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
		c.markWaited(&e, now)
		c.emit(e)
	}
	return err
}

// emit tells Observe of e: at once on the caller's goroutine, or, once the
// call's decisions are made on another, through the queue that the caller's
// goroutine reads.
func (c *callState) emit(e Event) {
	if c.events != nil {
		c.events.push(e)
		return
	}
	c.observe(c.ctx, e)
}

// markWaited sets e's Waited to the time since the pending wait began, if one
// did, and ends it.
func (c *callState) markWaited(e *Event, now time.Time) {
	if c.waitFrom.IsZero() {
		return
	}
	if e.Waited = max(now.Sub(c.waitFrom), 0); e.Waited > 0 {
		e.WaitedFor = waitByNames[c.waitBy]
	}
	c.waitFrom = time.Time{}
}

// observeAttempt tells Observe, if set, how attempt n, which began at began
// and ended at end, went, and what follows it. It is small enough to be
// inlined, so that a call without Observe pays nothing for it.
func (c *callState) observeAttempt(n int, began, end time.Time, err error, unknown bool, s retryStep, hedge bool) {
	if c.observe != nil {
		c.tellAttempt(n, began, end, err, unknown, s, hedge)
	}
}

func (c *callState) tellAttempt(n int, began, end time.Time, err error, unknown bool, s retryStep, hedge bool) {
	e := Event{
		Attempt:        n,
		Err:            err,
		Duration:       end.Sub(began),
		Elapsed:        end.Sub(c.start),
		Retry:          s.retry,
		Wait:           s.wait,
		Backoff:        s.backoff,
		ServerDelay:    s.server,
		OutcomeUnknown: unknown,
		Hedge:          hedge,
	}
	if !hedge {
		c.markWaited(&e, began)
	}
	c.emit(e)
}

// retryStep is the decision after a failed attempt, with what made it.
type retryStep struct {
	retry   bool          // a retry follows (set by the loop, after its own checks)
	wait    time.Duration // until the next attempt
	backoff time.Duration // the policy's backoff for this retry
	server  time.Duration // the server's requested delay; 0 if none
}

// decideNext is Next for a non-nil err whose facts are f, with the parts of the
// wait kept apart for Observe.
func decideNext(p *Policy, attempt int, prev time.Duration, err error, f *facts, now, deadline time.Time, u float64) (retryStep, error) {
	var s retryStep
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
