package hedging

import (
	"context"
	"errors"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

// epoch is virtual time 0 as a time.Time, for the Budget and retry.Next,
// which take the time as an argument.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// The hedged call in virtual time: the rules of the core's loop (retry.Do
// with Policy.HedgeDelay set, hedge.go), one call at a time, for the hedging
// study. retry.Do cannot run in virtual time outside a synctest bubble, so
// this file restates its rules, and TestHedgeModelMatchesTheCore runs the
// same calls through retry.Do in a bubble and compares every attempt. The
// decisions themselves are the library's: retry.Next decides after each
// failure (classifier, MaxAttempts, backoff, the deadline), the Policy's
// Hedge gives each hedge delay and is told how each attempt ended (an
// adaptive.Hedge learns), and its Budget is asked with the virtual time.
//
// The rules, as the core applies them:
//
//   - The first attempt starts when the call does, after a Deposit in the
//     Budget. A hedge is planned a Hedge.Delay(n, prev, u) after the last
//     attempt started (n = 1 for the first hedge), while fewer than
//     MaxInFlight (0: 2) attempts are in flight and fewer than MaxAttempts
//     (0: 4; hedges count) have started. When its time comes it starts if
//     the deadline leaves MinAttemptTime and the Budget grants a Withdraw;
//     otherwise hedging ends and the attempts in flight go on.
//   - The first success wins: every other attempt is cancelled, and the call
//     ends then (fn returns as its context ends).
//   - A failure is judged by retry.Next with the number of attempts started
//     so far. A wait it gives holds every later attempt until it has passed
//     (notBefore). If attempts are left in flight, a retryable failure is
//     replaced once that wait has passed, by a hedge (no hedge delay); a stop
//     for want of attempts, time or the server's patience ends hedging but
//     lets those in flight win; any other stop ends the call and cancels
//     them. With none in flight, a retryable failure is retried after its
//     wait, the Budget asked at once, as Do does.
//   - AttemptTimeout ends an attempt, which then fails with
//     context.DeadlineExceeded (retryable); the caller's deadline ends the
//     call, and every attempt with it.
//   - Without a Hedge the same rules give Do's plain loop: one attempt at a
//     time, each failure retried after its wait.
//
// Not modelled: a Limiter, Observe, an error's Unrepeatable reason (the
// study's server gives none), panics.

// hcall is the state of one call, as the core's hedger keeps it.
type hcall struct {
	start       time.Duration
	deadline    time.Duration // 0: none
	attempts    int
	hedges      int
	hedgeWait   time.Duration // the delay before the last hedge
	prev        time.Duration // the last retry wait, for Next
	lastStart   time.Duration
	notBefore   time.Duration
	noMore      bool  // no hedge will start any more
	ended       error // no attempt at all may start any more, and why
	next        time.Duration
	planned     bool // next holds the time of the next attempt
	nextRetry   bool // it is a retry (none in flight), not a hedge
	gen         uint32
	done        bool
	flights     []hflight
	firstHedged bool // a hedge started
}

// hflight is an attempt in flight.
type hflight struct {
	n     int
	began time.Duration
	hedge bool
	id    int32 // the server's record of it
}

// hedgeRun is one run of the study: the calls, the server and the clock.
type hedgeRun struct {
	c       Config
	p       retry.Policy
	q       sim.Queue[hedgeEvent]
	srv     serverState
	calls   []hcall
	learn   interface{ Learn(time.Duration, error) }
	u       func() float64
	res     Result
	traceOf map[[2]int32]int // (call, attempt) -> index in res.Trace
	// The hedge delays planned, for their mean.
	delaySum float64
	delays   int
	// Deadlines and attempt timeouts, each the same time after its start,
	// come due in the order they were set: two queues in time order beside
	// the event queue, which they would fill (a deadline is pending for
	// every call in flight, and nearly none comes due).
	deadlines, timeouts fifo
	flightSlab          []hflight // room for the flights of calls to come
	slab                int       // the room each call takes: MaxInFlight, or 0 if it is too large
}

// timer is a deadline or an attempt timeout.
type timer struct {
	at      time.Duration
	call, n int32
}

// fifo is a queue of timers set in time order.
type fifo struct {
	items []timer
	head  int
}

func (f *fifo) push(t timer) { f.items = append(f.items, t) }

func (f *fifo) peek() (timer, bool) {
	if f.head == len(f.items) {
		return timer{}, false
	}
	return f.items[f.head], true
}

func (f *fifo) pop() timer {
	t := f.items[f.head]
	f.head++
	if f.head > 4096 && 2*f.head > len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
	return t
}

// Kinds of hedge event.
const (
	hArrive       uint8 = iota // a call starts
	hFire                      // the planned attempt's time has come
	hAnswer                    // the server's answer reaches the client
	hStallDone                 // an attempt's stall at the server is over
	hServiceDone               // the server has finished an attempt's work
	hCancelArrive              // a client's cancellation reaches the server
)

type hedgeEvent struct {
	kind uint8
	call int32
	n    int32 // the attempt's number in its call
	id   int32 // the server's record
	gen  uint32
	err  error
}

// errAttemptTimeout is what fn returns when its attempt's context ends at
// AttemptTimeout: the context's own error.
var errAttemptTimeout = context.DeadlineExceeded

func (r *hedgeRun) maxAttempts() int {
	if r.p.MaxAttempts == 0 {
		return 4
	}
	return r.p.MaxAttempts
}

func (r *hedgeRun) maxInFlight() int {
	if r.p.MaxInFlight <= 0 {
		return 2
	}
	return r.p.MaxInFlight
}

// fits is the core's rule: wait, then MinAttemptTime, both before the
// deadline (none: always).
func (r *hedgeRun) fits(c *hcall, now, wait time.Duration) bool {
	if c.deadline == 0 {
		return true
	}
	left := c.deadline - now
	wait, min := max(wait, 0), max(r.p.MinAttemptTime, 0)
	return wait < left && min < left-wait
}

func (r *hedgeRun) deadlineTime(c *hcall) time.Time {
	if c.deadline == 0 {
		return time.Time{}
	}
	return epoch.Add(c.deadline)
}

// begin starts call i at now: the deadline, the Deposit, the first attempt
// and the first hedge's plan.
func (r *hedgeRun) begin(i int, now time.Duration) {
	c := &r.calls[i]
	c.start = now
	if r.c.Timeout > 0 {
		c.deadline = now + r.c.Timeout
		r.deadlines.push(timer{at: c.deadline, call: int32(i)})
		if !r.fits(c, now, 0) {
			r.finish(i, now, retry.ErrNoTimeLeft)
			return
		}
	}
	if r.p.Budget != nil {
		r.p.Budget.Deposit(epoch.Add(now))
	}
	r.launch(i, now, false)
	r.plan(i, now, false)
	r.fireDue(i, now)
}

// launch starts the call's next attempt at now.
func (r *hedgeRun) launch(i int, now time.Duration, hedge bool) {
	c := &r.calls[i]
	c.attempts++
	n := c.attempts
	id := r.srv.send(r, i, n, now)
	if c.flights == nil && r.slab > 0 {
		// A call's flights in a slab of its own: no allocation per call.
		if len(r.flightSlab) < r.slab {
			r.flightSlab = make([]hflight, 1024*r.slab)
		}
		c.flights, r.flightSlab = r.flightSlab[:0:r.slab], r.flightSlab[r.slab:]
	}
	c.flights = append(c.flights, hflight{n: n, began: now, hedge: hedge, id: id})
	c.lastStart = now
	if hedge {
		c.hedges++
		r.res.Hedges++
		if !c.firstHedged {
			c.firstHedged = true
			r.res.HedgedCalls++
		}
	}
	r.res.Attempts++
	k := int(max(now, 0) / time.Second)
	for len(r.res.PerSecond) <= k {
		r.res.PerSecond = append(r.res.PerSecond, 0)
	}
	r.res.PerSecond[k]++
	if t := r.p.AttemptTimeout; t > 0 && (c.deadline == 0 || t < c.deadline-now) {
		r.timeouts.push(timer{at: now + t, call: int32(i), n: int32(n)})
	}
	if r.c.Trace {
		r.traceOf[[2]int32{int32(i), int32(n)}] = len(r.res.Trace)
		r.res.Trace = append(r.res.Trace, AttemptTrace{Call: i, N: n, Hedge: hedge, Start: now - c.start, End: -1})
	}
}

// plan sets when the next attempt starts: a hedge a hedge delay after the
// last start, or, replacing a failure, once its wait has passed; never
// before notBefore. None when no more may start, none is in flight, or
// MaxInFlight are; none without a Hedge.
func (r *hedgeRun) plan(i int, now time.Duration, replace bool) {
	c := &r.calls[i]
	c.gen++
	c.planned, c.nextRetry = false, false
	if r.p.HedgeDelay == nil || c.noMore || len(c.flights) == 0 || len(c.flights) >= r.maxInFlight() ||
		(r.maxAttempts() > 0 && c.attempts >= r.maxAttempts()) {
		return
	}
	at := c.notBefore
	if !replace {
		c.hedgeWait = max(r.p.HedgeDelay.Delay(c.hedges+1, c.hedgeWait, r.u()), 0)
		r.delaySum += float64(c.hedgeWait)
		r.delays++
		at = max(at, c.lastStart+c.hedgeWait)
	}
	r.schedule(i, now, at, false)
}

// schedule plans the call's next attempt at at (now, if at has passed).
func (r *hedgeRun) schedule(i int, now, at time.Duration, retrying bool) {
	c := &r.calls[i]
	c.gen++
	c.next, c.planned, c.nextRetry = at, true, retrying
	if at > now {
		r.q.Schedule(at, hedgeEvent{kind: hFire, call: int32(i), gen: c.gen})
	}
}

// fireDue starts the planned attempts whose time has come, as the core's
// loop does before it waits again.
func (r *hedgeRun) fireDue(i int, now time.Duration) {
	c := &r.calls[i]
	for !c.done && c.planned && c.next <= now {
		r.fire(i, now)
	}
}

// fire starts the planned attempt: a retry if the deadline allows it, a
// hedge if the deadline and the Budget allow it (if not, hedging ends).
func (r *hedgeRun) fire(i int, now time.Duration) {
	c := &r.calls[i]
	c.planned = false
	if c.nextRetry {
		if c.deadline != 0 && now >= c.deadline {
			r.finish(i, now, context.DeadlineExceeded)
			return
		}
		if !r.fits(c, now, 0) {
			r.finish(i, now, retry.ErrNoTimeLeft)
			return
		}
		r.launch(i, now, false)
		r.plan(i, now, false)
		return
	}
	if !r.fits(c, now, 0) || (r.p.Budget != nil && !r.p.Budget.Withdraw(epoch.Add(now))) {
		r.stopHedging(i, now)
		return
	}
	r.launch(i, now, true)
	r.plan(i, now, false)
}

func (r *hedgeRun) stopHedging(i int, now time.Duration) {
	r.calls[i].noMore = true
	r.plan(i, now, false)
}

// take removes attempt n from the call's flights.
func (r *hedgeRun) take(i, n int) (hflight, bool) {
	c := &r.calls[i]
	for j, f := range c.flights {
		if f.n == n {
			c.flights = append(c.flights[:j], c.flights[j+1:]...)
			return f, true
		}
	}
	return hflight{}, false
}

// land judges attempt n of call i, which ended at now with err.
func (r *hedgeRun) land(i, n int, now time.Duration, err error) {
	c := &r.calls[i]
	f, ok := r.take(i, n)
	if c.done || !ok {
		return // cut already: its answer is not read
	}
	r.traced(i, n, now, false)
	if r.learn != nil {
		r.learn.Learn(now-f.began, err)
	}
	if err == nil {
		r.finish(i, now, nil)
		return
	}
	if c.deadline != 0 && now >= c.deadline {
		r.finish(i, now, context.DeadlineExceeded)
		return
	}
	wait, reason := retry.Next(r.p, c.attempts, c.prev, err, epoch.Add(now), r.deadlineTime(c), r.u())
	if reason == nil {
		c.prev = wait
		c.notBefore = max(c.notBefore, now+wait)
	}
	switch {
	case reason == retry.ErrExhausted || reason == retry.ErrNoTimeLeft || reason == retry.ErrServerDelay:
		if c.ended != nil {
			reason = c.ended
		}
		if len(c.flights) == 0 {
			r.finish(i, now, reason)
			return
		}
		if c.ended == nil {
			c.ended = reason
		}
		r.stopHedging(i, now)
	case reason != nil:
		r.finish(i, now, reason)
		return
	case len(c.flights) > 0:
		r.plan(i, now, true)
	case c.ended != nil:
		r.finish(i, now, c.ended)
		return
	default:
		at := max(now+wait, c.notBefore)
		if !r.fits(c, now, at-now) {
			r.finish(i, now, retry.ErrNoTimeLeft)
			return
		}
		if r.p.Budget != nil && !r.p.Budget.Withdraw(epoch.Add(now)) {
			r.finish(i, now, retry.ErrBudgetExhausted)
			return
		}
		r.schedule(i, now, at, true)
	}
	r.fireDue(i, now)
}

// finish ends call i at now, with reason (nil: success): the attempts in
// flight are cancelled, and the server hears of it.
func (r *hedgeRun) finish(i int, now time.Duration, reason error) {
	c := &r.calls[i]
	c.done, c.planned = true, false
	c.gen++
	for _, f := range c.flights {
		r.traced(i, f.n, now, true)
		r.srv.cancel(r, f.id, now)
		r.res.Cut++
	}
	c.flights = c.flights[:0]
	r.res.End = max(r.res.End, now)
	if r.c.Trace {
		r.res.CallTrace[i] = CallTrace{Latency: now - c.start, Reason: reason}
	}
	if reason == nil {
		r.res.Latencies = append(r.res.Latencies, now-c.start)
		return
	}
	r.res.failed(reason)
}

// traced records the end of attempt n of call i, when tracing.
func (r *hedgeRun) traced(i, n int, now time.Duration, cut bool) {
	if !r.c.Trace {
		return
	}
	if k, ok := r.traceOf[[2]int32{int32(i), int32(n)}]; ok {
		r.res.Trace[k].End, r.res.Trace[k].Cut = now-r.calls[i].start, cut
	}
}

// timeout ends attempt n of call i at its AttemptTimeout: fn returns the
// context's error, and the server is told the attempt was cancelled.
func (r *hedgeRun) timeout(i, n int, now time.Duration) {
	c := &r.calls[i]
	if c.done {
		return
	}
	for _, f := range c.flights {
		if f.n == n {
			r.srv.cancel(r, f.id, now)
			r.res.TimedOut++
			r.land(i, n, now, errAttemptTimeout)
			return
		}
	}
}

// failed counts a call that failed, by reason.
func (res *Result) failed(reason error) {
	for k := range res.Failed {
		if errors.Is(res.Failed[k].Reason, reason) || res.Failed[k].Reason.Error() == reason.Error() {
			res.Failed[k].Count++
			return
		}
	}
	res.Failed = append(res.Failed, sim.ReasonCount{Reason: reason, Count: 1})
}
