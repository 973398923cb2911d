package retry

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// learner is what a Hedge or a Limiter may also be: told how each attempt
// ended (how long it took and its error, nil for a success), so that it can
// adapt. Attempts the call cancelled itself are not told: their end says
// nothing about the dependency.
type learner interface {
	Learn(d time.Duration, err error)
}

// learnerOf returns x as a learner, or nil.
func learnerOf(x any) learner {
	l, _ := x.(learner)
	return l
}

// flight is an attempt of a hedged call that has started and not ended.
type flight struct {
	n      int
	began  time.Time
	hedge  bool
	cancel context.CancelFunc
	cut    bool // the call cancelled it: another attempt won, or the call stopped
}

// landing is how an attempt of a hedged call ended, sent by its goroutine.
type landing struct {
	n        int
	err      error
	end      time.Time
	panicked bool
	panicVal any
}

// hedger is the state of one hedged call. It runs on the goroutine that
// called Do; only the attempts run on goroutines of their own, and every one
// of them has ended by the time the call returns.
type hedger struct {
	c        *call
	p        *Policy
	ctx      context.Context
	fn       func(context.Context) error
	deadline time.Time
	u        func() float64
	learners [2]learner // the Hedge's and the Limiter's, when they learn

	maxAttempts int // negative: no limit
	maxInFlight int
	landings    chan landing
	flights     []flight

	prev      time.Duration // the last retry wait, for Decorrelated
	hedges    int           // hedges started
	hedgeWait time.Duration // the delay before the last hedge
	lastStart time.Time     // when the last attempt started
	noMore    bool          // no hedge will start any more; those in flight may still win
	ended     error         // why no attempt at all may start any more, once an attempt's end said so
	notBefore time.Time     // the waits failures earned hold the next attempt until then

	next      time.Time // when the next attempt starts; zero when none is planned
	nextRetry bool      // it is a retry (none in flight), not a hedge
	booking   Reservation
	booked    bool // booking holds the Limiter's booking for next

	panicked bool
	panicVal any
}

// runHedged runs a call whose Policy hedges, and returns the number of the
// attempt that won, or the call's error. It is a function of its own, with
// its state on the heap, so that a call that does not hedge keeps all of its
// own on the stack.
func runHedged(ctx context.Context, p Policy, fn func(context.Context) error) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	c := &call{ctx: ctx, observe: p.Observe}
	now, deadline, err := c.begin(ctx, &p, fn)
	if err != nil {
		return 0, err
	}
	h := &hedger{c: c, p: &p, ctx: ctx, fn: fn, deadline: deadline, u: rand.Float64}
	if p.Rand != nil {
		h.u = p.Rand
	}
	h.learners = [2]learner{learnerOf(p.Hedge), learnerOf(p.Limiter)}
	h.maxAttempts = p.MaxAttempts
	if h.maxAttempts == 0 {
		h.maxAttempts = defaultMaxAttempts
	}
	h.maxInFlight = p.MaxInFlight
	if h.maxInFlight <= 0 {
		h.maxInFlight = 2
	}
	h.landings = make(chan landing, h.maxInFlight)
	defer func() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}()

	h.launch(now, false)
	h.plan(false)
	for {
		if !h.next.IsZero() {
			if d := time.Until(h.next); d <= 0 {
				if n, err, done := h.fire(); done {
					return n, err
				}
				continue
			} else if c.timer == nil {
				c.timer = time.NewTimer(d)
			} else {
				c.timer.Reset(d)
			}
		}
		var timer <-chan time.Time
		if !h.next.IsZero() {
			timer = c.timer.C
		}
		select {
		case l := <-h.landings:
			if n, err, done := h.land(l); done {
				return n, err
			}
		case <-timer:
			if n, err, done := h.fire(); done {
				return n, err
			}
		case <-ctx.Done():
			return h.finish(time.Now(), stopCause(ctx), 0)
		}
	}
}

// launch starts attempt number c.attempts+1 on a goroutine of its own, on a
// context that the call can cancel, bounded by AttemptTimeout, and numbered.
func (h *hedger) launch(now time.Time, hedge bool) {
	h.c.attempts++
	n := h.c.attempts
	var actx context.Context
	var cancel context.CancelFunc
	if tctx, tcancel := attemptContext(h.ctx, now, h.p.AttemptTimeout, h.deadline); tcancel != nil {
		actx, cancel = tctx, tcancel
	} else {
		actx, cancel = context.WithCancel(h.ctx)
	}
	num := &numbered{Context: actx}
	num.n.Store(int64(n))
	h.flights = append(h.flights, flight{n: n, began: now, hedge: hedge, cancel: cancel})
	h.lastStart = now
	if hedge {
		h.hedges++
	}
	go func() {
		l := landing{n: n}
		defer func() {
			if v := recover(); v != nil {
				l.panicked, l.panicVal = true, v
			}
			l.end = time.Now()
			h.landings <- l
		}()
		l.err = h.fn(num)
	}()
}

// plan sets when the next hedge starts: a hedge delay after the last attempt
// started, or, when it replaces an attempt that failed (replace), as soon as
// that failure's wait has passed; never before the wait of any failure has
// (a server's delay above all). None when no more attempts may start or none
// is in flight to hedge.
func (h *hedger) plan(replace bool) {
	h.unbook()
	h.next, h.nextRetry = time.Time{}, false
	if h.noMore || len(h.flights) == 0 || len(h.flights) >= h.maxInFlight ||
		(h.maxAttempts > 0 && h.c.attempts >= h.maxAttempts) {
		return
	}
	at := h.notBefore
	if !replace {
		h.hedgeWait = max(h.p.Hedge.Delay(h.hedges+1, h.hedgeWait, unit(h.u())), 0)
		if next := h.lastStart.Add(h.hedgeWait); next.After(at) {
			at = next
		}
	}
	h.next = at
}

// fire starts the planned attempt, whose time has come: the retry, or the
// hedge once the Limiter, the deadline and the Budget allow it. A hedge
// they refuse ends the hedging, not the call.
func (h *hedger) fire() (int, error, bool) {
	now := time.Now()
	p := h.p
	if h.booked && h.booking.Slack > 0 && now.Sub(h.next) > h.booking.Slack {
		// Woken too late for the booking: book again, as Do does.
		h.unbook()
	}
	if h.nextRetry {
		if reason := ready(h.ctx, p, now, h.deadline); reason != nil {
			n, err := h.finish(now, reason, 0)
			return n, err, true
		}
		if p.Limiter != nil && !h.booked {
			// A booking given back after a late wake: book again, and wait
			// for it.
			r, at, _, reason := book(h.ctx, p, now, h.deadline)
			if reason != nil {
				n, err := h.finish(time.Now(), reason, 0)
				return n, err, true
			}
			h.booking, h.booked, h.next = r, true, at
			if at.After(now) {
				return 0, nil, false
			}
		}
		h.booked = false
		h.launch(now, false)
		h.plan(false)
		return 0, nil, false
	}
	if p.Limiter != nil && !h.booked {
		r, at, _, reason := book(h.ctx, p, now, h.deadline)
		if reason != nil {
			h.stopHedging()
			return 0, nil, false
		}
		h.booking, h.booked, h.next = r, true, at
		if at.After(now) {
			return 0, nil, false // the timer fires again at the booking's start
		}
	}
	if !fits(now, 0, p.MinAttemptTime, h.deadline) || (p.Budget != nil && !p.Budget.Withdraw(now)) {
		h.stopHedging()
		return 0, nil, false
	}
	h.booked = false
	h.launch(now, true)
	h.plan(false)
	return 0, nil, false
}

// stopHedging ends the hedging of the call: the attempts in flight go on.
func (h *hedger) stopHedging() {
	h.noMore = true
	h.plan(false)
}

// unbook gives back the booking for the next attempt, if there is one.
func (h *hedger) unbook() {
	if h.booked {
		h.p.Limiter.Cancel(h.booking)
		h.booked = false
	}
}

// take removes attempt n from the flights and releases its context.
func (h *hedger) take(n int) flight {
	for i, f := range h.flights {
		if f.n == n {
			h.flights = append(h.flights[:i], h.flights[i+1:]...)
			f.cancel()
			return f
		}
	}
	return flight{n: n}
}

// land judges an attempt that has ended. A success wins the call; an error
// that stops the call ends it, with the attempts in flight cancelled; one
// after which no attempt may start (attempts, time or the server's patience
// spent, or the error's own Unrepeatable reason) lets them run, and starts
// none; a retryable one lets them run and is replaced once its wait has
// passed, or, when none is left, plans a retry.
func (h *hedger) land(l landing) (int, error, bool) {
	f := h.take(l.n)
	c, p := h.c, h.p
	if l.panicked {
		h.panicked, h.panicVal = true, l.panicVal
		n, err := h.finish(time.Now(), nil, 0)
		return n, err, true
	}
	for _, lr := range h.learners {
		if lr != nil {
			lr.Learn(l.end.Sub(f.began), l.err)
		}
	}
	if l.err == nil {
		c.observeFlight(f, l.end, nil, false, step{})
		n, err := h.finish(time.Now(), nil, l.n)
		return n, err, true
	}
	now := time.Now()
	c.last = unmark(l.err)
	facts := inspect(l.err)
	unknown := facts.outcomeUnknown()
	c.unknown = c.unknown || unknown
	if passed(h.ctx, now) {
		c.observeFlight(f, l.end, c.last, unknown, step{})
		n, err := h.finish(now, stopCause(h.ctx), 0)
		return n, err, true
	}
	s, reason := decide(p, c.attempts, h.prev, l.err, &facts, now, h.deadline, h.u())
	if reason == nil {
		// A failure earns its wait, as without hedging: no attempt starts
		// before it has passed, however many are in flight, so that a
		// failing dependency is not sent hedges faster than retries. A
		// server's delay is part of that wait.
		h.prev = s.wait
		if at := now.Add(s.wait); at.After(h.notBefore) {
			h.notBefore = at
		}
	}
	switch {
	case reason == ErrExhausted || reason == ErrNoTimeLeft || reason == ErrServerDelay || facts.refused:
		// No attempt may start any more; those in flight may still win.
		// An error's Unrepeatable reason forbids a repeat of the work, and
		// those in flight have been sent already: cutting them would undo
		// nothing, and one may still succeed.
		c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
		if h.ended != nil {
			reason = h.ended // the first end that allowed no more is why the call stopped
		}
		if len(h.flights) == 0 {
			n, err := h.finish(now, reason, 0)
			return n, err, true
		}
		if h.ended == nil {
			h.ended = reason
		}
		h.stopHedging()
		return 0, nil, false
	case reason != nil:
		c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
		n, err := h.finish(now, reason, 0)
		return n, err, true
	case len(h.flights) > 0:
		// Others are in flight: they go on, and the failed attempt is
		// replaced as a retry would be, once its wait has passed, however
		// long the hedge delay (gRFC A6's rule for a non-fatal status).
		c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
		h.plan(true)
		return 0, nil, false
	case h.ended != nil:
		// An earlier attempt's end allowed no more.
		c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
		n, err := h.finish(now, h.ended, 0)
		return n, err, true
	}
	// None is in flight: a retry after its wait and every earlier failure's,
	// a server's delay from an attempt that ended before it included, with
	// the checks Do makes.
	at := now.Add(s.wait)
	if at.Before(h.notBefore) {
		at = h.notBefore
		if !fits(now, at.Sub(now), p.MinAttemptTime, h.deadline) {
			c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
			n, err := h.finish(now, ErrNoTimeLeft, 0)
			return n, err, true
		}
	}
	h.unbook()
	if p.Limiter != nil {
		var r Reservation
		if r, at, _, reason = book(h.ctx, p, at, h.deadline); reason != nil {
			c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
			n, err := h.finish(time.Now(), reason, 0)
			return n, err, true
		}
		h.booking, h.booked = r, true
	}
	if p.Budget != nil && !p.Budget.Withdraw(now) {
		c.observeFlight(f, l.end, c.last, unknown, step{server: s.server})
		n, err := h.finish(now, ErrBudgetExhausted, 0)
		return n, err, true
	}
	s.retry, s.wait = true, max(at.Sub(now), 0)
	c.observeFlight(f, l.end, c.last, unknown, s)
	c.waitFrom, c.waitBy = now, waitBy(Event{Retry: true, Wait: s.wait, Backoff: s.backoff, ServerDelay: s.server})
	h.next, h.nextRetry = at, true
	return 0, nil, false
}

// finish ends the call with reason (nil: attempt winner won): it cancels the
// attempts still in flight and waits for each to return, tells Observe of
// them, and re-raises a panic of any attempt once they have all returned.
func (h *hedger) finish(now time.Time, reason error, winner int) (int, error) {
	h.unbook()
	h.next = time.Time{}
	for i := range h.flights {
		h.flights[i].cut = true
		h.flights[i].cancel()
	}
	for len(h.flights) > 0 {
		l := <-h.landings
		f := h.take(l.n)
		if l.end.After(now) {
			now = l.end // the call ends as Do returns, once every loser has
		}
		if l.panicked && !h.panicked {
			h.panicked, h.panicVal = true, l.panicVal
		}
		// Every attempt is told, a loser that succeeded too included (its
		// event has no Err, after the winner's). One cut in flight may have
		// done its work.
		unknown := l.err != nil && OutcomeUnknown(l.err)
		h.c.unknown = h.c.unknown || unknown
		h.c.observeFlight(f, l.end, unmark(l.err), unknown, step{})
	}
	if h.panicked {
		panic(h.panicVal)
	}
	if reason == nil {
		h.c.waitFrom = time.Time{}
		_ = h.c.stop(now, nil)
		return winner, nil
	}
	return 0, h.c.stop(now, reason)
}

// observeFlight tells Observe how attempt f ended, at end.
func (c *call) observeFlight(f flight, end time.Time, err error, unknown bool, s step) {
	if c.observe == nil {
		return
	}
	e := Event{
		Attempt:        f.n,
		Err:            err,
		Duration:       end.Sub(f.began),
		Elapsed:        end.Sub(c.start),
		Retry:          s.retry,
		Wait:           s.wait,
		Backoff:        s.backoff,
		ServerDelay:    s.server,
		OutcomeUnknown: unknown,
		Hedge:          f.hedge,
	}
	if !f.hedge {
		c.waited(&e, f.began)
	}
	c.observe(c.ctx, e)
}

// hedgedValue is DoValue for a Policy that hedges: each attempt's value is
// kept apart, and the winner's is returned. A loser's value is dropped.
func hedgedValue[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	type kept struct {
		n int
		v T
	}
	var mu sync.Mutex
	var vals []kept
	winner, err := runHedged(ctx, p, func(ctx context.Context) error {
		v, err := fn(ctx)
		if err == nil {
			n := AttemptFrom(ctx)
			mu.Lock()
			vals = append(vals, kept{n, v})
			mu.Unlock()
		}
		return err
	})
	var zero T
	if err != nil {
		return zero, err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range vals {
		if k.n == winner {
			return k.v, nil
		}
	}
	return zero, nil
}
