package retry

import (
	"context"
	"sync"
	"time"
)

// attemptLearner is what a Hedge or a Limiter may also be: told how each attempt
// ended (how long it took and its error, nil for a success), so that it can
// adapt. Attempts the call cut itself are not told: their end says nothing
// about the dependency.
type attemptLearner interface {
	Learn(d time.Duration, err error)
}

// learnerOf returns x as a learner, or nil.
func learnerOf(x any) attemptLearner {
	l, _ := x.(attemptLearner)
	return l
}

// hedgedCall is a call whose Policy hedges. Its attempts run one at a time on
// the caller's goroutine (runCall, in loop.go) until a hedge comes due beside
// one: the hedge's timer then starts the coordinator (coordinate), which
// from then on runs every attempt but that one on a goroutine of its own,
// and makes the scheduler's decisions as attempts end, bookings come back
// and planned times come; the caller's goroutine hands over its attempt's
// end and waits (await), running Observe as the events come. Every
// attempt has ended by the time the call returns.
type hedgedCall struct {
	c    callState
	plan hedgePlan // c.h
	fn   func(context.Context) error

	mu         sync.Mutex
	flights    []flightAttempt
	one        [1]flightAttempt  // flights' room for the usual single attempt
	due        *time.Timer       // the hedge timer of the attempt on the caller's goroutine
	landings   chan attemptEnd   // made once a hedge is due
	bookings   chan hedgeBooking // a hedge's booking, asked for off the coordinator's loop
	bookCtx    context.Context
	bookStop   context.CancelFunc
	queue      *eventQueue // Observe's events, for the caller's goroutine
	over       bool        // the call has ended: a booking that comes back is given back
	wonByHedge bool        // a hedge won the call
	done       chan struct{}
	result     hedgedResult
}

// flightAttempt is an attempt that has started and not ended.
type flightAttempt struct {
	n       int
	began   time.Time
	hedge   bool
	ctx     *cutCtx
	timeout context.CancelFunc // ends the attempt's AttemptTimeout context; nil without one
	b       bounds             // its slot and breaker's leave, given back as it lands
}

// attemptEnd is how an attempt ended.
type attemptEnd struct {
	n        int
	err      error
	end      time.Time
	panicked bool
	panicVal any
}

// hedgeBooking is a Limiter's answer to a hedge's hedgeBooking.
type hedgeBooking struct {
	gen uint64
	r   Reservation
	at  time.Time
	err error
}

// hedgedResult is the outcome of a hedged call, for the caller's goroutine.
type hedgedResult struct {
	n        int
	err      error
	panicked bool
	panicVal any
}

// newHedged prepares a call of fn hedged as c's Policy says.
func newHedged(fn func(context.Context) error, c *callState) *hedgedCall {
	h := &hedgedCall{fn: fn}
	h.c.p = c.p
	h.flights = h.one[:0]
	return h
}

// startFlight records attempt n, starting at now, as in flight, on a context of
// its own that the call can cut, and returns it.
func (h *hedgedCall) startFlight(n int, now time.Time, hedge bool) flightAttempt {
	f := h.newFlight(n, now, hedge)
	f.b, h.c.b = h.c.b, bounds{} // what the scheduler took for it
	h.mu.Lock()
	h.flights = append(h.flights, f)
	h.mu.Unlock()
	return f
}

// newFlight makes attempt n, starting at now, with a context of its own
// that the call can cut.
func (h *hedgedCall) newFlight(n int, now time.Time, hedge bool) flightAttempt {
	c := &h.c
	parent, cancel := attemptContext(c.ctx, now, c.p.AttemptTimeout, c.deadline)
	return flightAttempt{n: n, began: now, hedge: hedge, ctx: &cutCtx{Context: parent, n: n}, timeout: cancel}
}

// takeFlight removes attempt n from the flights.
func (h *hedgedCall) takeFlight(n int) flightAttempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, f := range h.flights {
		if f.n == n {
			h.flights = append(h.flights[:i], h.flights[i+1:]...)
			return f
		}
	}
	return flightAttempt{n: n}
}

// releaseFlight ends what attempt f held once it has ended: its context is cut,
// unless it won, and its AttemptTimeout context ends either way, as the
// Policy documents.
func (f flightAttempt) releaseFlight(won bool) {
	if f.timeout != nil {
		f.timeout()
	}
	if f.ctx == nil {
		return
	}
	if won {
		f.ctx.keepAlive()
	} else {
		f.ctx.cutOff()
	}
}

// runInline runs attempt n, which starts at now, on the caller's goroutine,
// with its first hedge armed to start the coordinator when it comes due. It
// returns the attempt's error, or handed true when a hedge came due: the
// coordinator then judges the attempt, and the caller awaits the call's
// outcome.
func (h *hedgedCall) runInline(n int, now time.Time) (err error, handed bool) {
	c := &h.c
	f := h.newFlight(n, now, false)
	f.b, c.b = c.b, bounds{} // the coordinator gives them back if it judges this attempt
	// The coordinator reads the call's state once the timer fires: the lock
	// orders what is written here before it.
	h.mu.Lock()
	h.flights = append(h.flights, f)
	c.planHedge(false)
	armed := !c.h.next.IsZero()
	if armed {
		d := c.h.next.Sub(now)
		if h.due == nil {
			h.due = time.AfterFunc(d, h.coordinate)
		} else {
			h.due.Reset(d)
		}
	}
	h.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			h.inlinePanicked(n, armed)
		}
	}()
	err = h.fn(f.ctx)
	ok = true
	if armed && !h.due.Stop() {
		h.handOver(attemptEnd{n: n, err: err, end: time.Now()})
		return nil, true
	}
	h.flights = h.flights[:0] // no hedge came due: this was the only attempt in flight, and no other goroutine runs
	f.releaseFlight(err == nil)
	c.b = f.b // runCall gives them back once it has judged the end
	return err, false
}

// inlinePanicked is run as a panic leaves attempt n on the caller's goroutine:
// with a hedge due, the coordinator is told, so that it cuts the others and
// waits for them before the panic goes on up.
func (h *hedgedCall) inlinePanicked(n int, armed bool) {
	if armed && !h.due.Stop() {
		h.handOver(attemptEnd{n: n, end: time.Now(), panicked: true})
		h.setupShared()
		<-h.done
		return
	}
	f := h.takeFlight(n)
	f.releaseFlight(false)
	f.b.settle(f.began, time.Now(), errNoNews)
}

// handOver gives the end of the caller's attempt to the coordinator.
func (h *hedgedCall) handOver(l attemptEnd) {
	h.setupShared()
	h.landings <- l
}

// setupShared makes, once, what the coordinator and the caller's goroutine share
// once a hedge is due; whichever of them comes first makes it.
func (h *hedgedCall) setupShared() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.landings != nil {
		return
	}
	h.landings = make(chan attemptEnd, max(h.c.h.maxInFlight, 1))
	h.bookings = make(chan hedgeBooking, 1)
	h.done = make(chan struct{})
	if h.c.observe != nil {
		h.queue = newEventQueue()
	}
}

// await waits, on the caller's goroutine, for the coordinator to end the
// call, running Observe for each event it sends, and returns the call's
// outcome; a panic of an attempt goes on from here.
func (h *hedgedCall) await() (int, error) {
	h.setupShared()
	var buf []Event
	observe := func() {
		if h.queue == nil {
			return
		}
		buf = h.queue.take(buf)
		for _, e := range buf {
			ctx := h.c.ctx
			if e.Done && h.wonByHedge {
				ctx = context.WithValue(ctx, hedgeWonKey{}, true) // see HedgeWon
			}
			h.c.observe(ctx, e)
		}
	}
	var signal chan struct{}
	if h.queue != nil {
		signal = h.queue.signal
	}
	for {
		select {
		case <-h.done:
			observe()
			if r := h.result; r.panicked {
				panic(r.panicVal)
			}
			return h.result.n, h.result.err
		case <-signal:
			observe()
		}
	}
}

// coordinate runs the call once a hedge is due, on the hedge timer's
// goroutine, until the call ends.
func (h *hedgedCall) coordinate() {
	h.setupShared()
	c := &h.c
	c.events = h.queue
	defer func() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}()
	for {
		pl := c.h
		if !pl.next.IsZero() && !pl.asking {
			if d := time.Until(pl.next); d <= 0 {
				if h.fireFlight() {
					return
				}
				continue
			} else if c.timer == nil {
				c.timer = time.NewTimer(d)
			} else {
				c.timer.Reset(d)
			}
		}
		var timer <-chan time.Time
		if !pl.next.IsZero() && !pl.asking {
			timer = c.timer.C
		}
		select {
		case l := <-h.landings:
			if h.landFlight(l) {
				return
			}
		case b := <-h.bookings:
			if h.actOn(c.hedgeBooked(b.gen, b.r, b.at, b.err)) {
				return
			}
		case <-timer:
			if h.fireFlight() {
				return
			}
		case <-c.ctx.Done():
			h.finishHedged(time.Now(), stopCause(c.ctx), 0)
			return
		}
	}
}

// fireFlight acts on the planned attempt, whose time has come, and reports
// whether the call has ended.
func (h *hedgedCall) fireFlight() bool {
	return h.actOn(h.c.fireNext(time.Now()))
}

// actOn does what the scheduler said, and reports whether the call has ended.
func (h *hedgedCall) actOn(what firing, reason error) bool {
	c := &h.c
	switch what {
	case fireRetry:
		h.launch(time.Now(), false)
	case fireHedge:
		h.launch(time.Now(), true)
	case fireBook:
		h.askBooking()
	case fireStop:
		h.finishHedged(time.Now(), reason, 0)
		return true
	}
	if what == fireRetry || what == fireHedge {
		c.planHedge(false)
	}
	return false
}

// askBooking asks the Limiter for a hedge's booking on a goroutine of its own, so
// that a slow Limiter holds up neither the attempts in flight nor the end
// of the call: an attempt that wins meanwhile ends the call at once, and the
// booking, no longer needed, is given back as it comes.
func (h *hedgedCall) askBooking() {
	c := &h.c
	if h.bookCtx == nil {
		h.bookCtx, h.bookStop = context.WithCancel(c.ctx)
	}
	ctx, p, deadline, gen := h.bookCtx, &c.p, c.deadline, c.h.gen
	go func() {
		r, at, _, err := bookAttempt(ctx, p, time.Now(), deadline)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.over {
			if err == nil {
				p.Limiter.Cancel(r)
			}
			return
		}
		h.bookings <- hedgeBooking{gen: gen, r: r, at: at, err: err} // one asked for at a time: never blocks
	}()
}

// launch starts attempt number c.attempts+1 on a goroutine of its own.
func (h *hedgedCall) launch(now time.Time, hedge bool) {
	c := &h.c
	c.attempts++
	n := c.attempts
	c.markStarted(now, hedge)
	f := h.startFlight(n, now, hedge)
	go func() {
		l := attemptEnd{n: n}
		defer func() {
			if v := recover(); v != nil {
				l.panicked, l.panicVal = true, v
			}
			l.end = time.Now()
			h.landings <- l
		}()
		l.err = h.fn(f.ctx)
	}()
}

// landFlight judges an attempt that has ended, and reports whether the call has
// ended.
func (h *hedgedCall) landFlight(l attemptEnd) bool {
	c := &h.c
	f := h.takeFlight(l.n)
	if l.panicked {
		c.h.inFlight--
		f.releaseFlight(false)
		f.b.settle(f.began, l.end, errNoNews)
		h.result.panicked, h.result.panicVal = true, l.panicVal
		h.finishHedged(time.Now(), nil, 0)
		return true
	}
	for _, lr := range [...]attemptLearner{learnerOf(c.p.HedgeDelay), learnerOf(c.p.Limiter)} {
		if lr != nil {
			lr.Learn(l.end.Sub(f.began), l.err)
		}
	}
	v := c.landAttempt(l.n, f.began, l.end, time.Now(), f.hedge, l.err)
	f.b.settle(f.began, l.end, health(l.err, c.counts))
	won := l.err == nil && v.done && v.reason == nil
	f.releaseFlight(won)
	h.wonByHedge = won && f.hedge // read by the caller's goroutine once the Done event is queued
	if v.done {
		h.finishHedged(v.at, v.reason, v.winner)
		return true
	}
	if v.retry {
		pl := c.h
		pl.booking, pl.booked = v.r, c.p.Limiter != nil
		pl.next, pl.nextRetry = v.at, true
	}
	return false
}

// finishHedged ends the call with reason (nil: attempt winner won): it cuts the
// attempts still in flight and waits for each to return, tells Observe of
// them, and hands the outcome to the caller's goroutine, which re-raises a
// panic of any attempt.
func (h *hedgedCall) finishHedged(now time.Time, reason error, winner int) {
	c := &h.c
	c.unbookNext()
	c.h.next = time.Time{}
	h.mu.Lock()
	h.over = true
	select {
	case b := <-h.bookings:
		if b.err == nil {
			c.p.Limiter.Cancel(b.r)
		}
	default:
	}
	flights := append([]flightAttempt(nil), h.flights...)
	h.mu.Unlock()
	if h.bookStop != nil {
		h.bookStop()
	}
	for _, f := range flights {
		f.ctx.cutOff()
	}
	for range flights {
		l := <-h.landings
		f := h.takeFlight(l.n)
		f.releaseFlight(false)
		f.b.settle(f.began, l.end, lostNews(l))
		if l.end.After(now) {
			now = l.end // the call ends as Do returns, once every loser has
		}
		if l.panicked && !h.result.panicked {
			h.result.panicked, h.result.panicVal = true, l.panicVal
		}
		// Every attempt is told, a loser that succeeded too included (its
		// event has no Err, after the winner's). One cut in flight may have
		// done its work.
		unknown := l.err != nil && OutcomeUnknown(l.err)
		c.unknown = c.unknown || unknown
		c.observeAttempt(f.n, f.began, l.end, unmark(l.err), unknown, retryStep{}, f.hedge)
	}
	if !h.result.panicked {
		if reason == nil {
			c.waitFrom = time.Time{}
			_ = c.stopCall(now, nil)
			h.result.n = winner
		} else {
			h.result.err = c.stopCall(now, reason)
		}
	}
	close(h.done)
}

// lostNews is the news of an attempt that the call cut as it ended, for its
// bounds: a success is one, and anything else, cut, says nothing.
func lostNews(l attemptEnd) error {
	switch {
	case l.panicked:
		return errNoNews
	case l.err == nil:
		return nil
	}
	return noNews{l.err}
}
