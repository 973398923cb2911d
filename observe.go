package retry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Event is what [Policy].Observe sees of a call: the end of each attempt,
// once Do has decided what follows it, and then the end of the call, with
// Done set. A call that succeeds at once sends two events; one that fails
// twice and then succeeds sends four:
//
//	{Attempt: 1, Err: err1, Retry: true, Wait: ...}
//	{Attempt: 2, Err: err2, Retry: true, Wait: ...}
//	{Attempt: 3}
//	{Attempt: 3, Done: true}
//
// A call that ends without an attempt ending (its context done before the
// first attempt, or during a wait) sends only the Done event for it. Events
// are plain values: fields may be added, so build them with field names.
type Event struct {
	// Attempt is the 1-based number of the attempt that ended; when Done,
	// the number of attempts made (0 if none was).
	Attempt int

	// Done reports that the call has ended: this is its last event, sent as
	// Do returns. Err is then what Do returns: nil on success, else the
	// *Error, whose Reason is also in Reason.
	Done bool

	// Err is the attempt's error, without any Permanent or Transient
	// marker; nil if it succeeded. When Done, the call's error.
	Err error

	// Duration is how long the attempt took; 0 when Done.
	Duration time.Duration

	// Elapsed is the time from the start of the call until this event.
	Elapsed time.Duration

	// Retry reports that another attempt follows after Wait: every check has
	// passed, the budget's included. It is false after the last attempt, and
	// when Done.
	Retry bool

	// Wait is the plan: when Retry, the time the call decided to wait
	// before the next attempt, the longest of Backoff, ServerDelay and the
	// limiter's delay. What it then really waited is the next event's
	// Waited.
	Wait time.Duration

	// Backoff is the policy's backoff for this retry, jitter included; 0
	// when no retry was decided.
	Backoff time.Duration

	// ServerDelay is the delay the attempt's error asked for (Retry-After,
	// RateLimit, X-RateLimit-Reset, a gRPC pushback: see CheckResponse); 0
	// if none. It is set even when the call stops because of it.
	ServerDelay time.Duration

	// Reason, when Done, says why the call stopped, as [Error].Reason does;
	// nil on success.
	Reason error

	// OutcomeUnknown reports that the attempt may have taken effect though it
	// failed (see the function [OutcomeUnknown]); when Done, that some
	// attempt may have, as [Error].OutcomeUnknown says.
	OutcomeUnknown bool

	// Waited is what happened: how long the call really waited before this
	// event's attempt started: the Limiter's wait before the first attempt,
	// a retry's wait before it (the previous event's Wait, as it turned
	// out). When Done, it is how long the call had waited since its last
	// attempt's event, when it ended during a wait or right after one (its
	// context ended, say, cutting the wait short); else 0.
	Waited time.Duration

	// Hedge reports that the attempt started as a hedge, beside others of
	// the call still in flight (see Policy.HedgeDelay). The attempt that won a
	// hedged call is the first whose event has no Err; the others in flight
	// then are cancelled, and their events follow it, each with the error
	// its cancellation gave it, or none when it succeeded too.
	Hedge bool

	// WaitedFor says what set the wait that Waited measures, as WaitSetBy
	// says it for Wait when that wait was decided: "backoff", "server" or
	// "limiter" (the Limiter's wait before a first attempt is "limiter");
	// "slot" when the wait for a Concurrency slot was the longest part of
	// it; "" when Waited is 0.
	WaitedFor string
}

// What set a wait, as WaitSetBy and WaitedSetBy say it.
const (
	waitByNone uint8 = iota
	waitByBackoff
	waitByServer
	waitByLimiter
	waitBySlot
)

var waitByNames = [...]string{"", "backoff", "server", "limiter", "slot"}

// WaitSetBy says what set Wait: "server" when the server's requested delay
// (Retry-After) was the longest part, "limiter" when the limiter made the
// attempt wait longer than both, "backoff" otherwise; "" when no retry
// follows.
func (e Event) WaitSetBy() string { return waitByNames[waitBy(e)] }

func waitBy(e Event) uint8 {
	switch {
	case !e.Retry:
		return waitByNone
	case e.Wait > max(e.Backoff, e.ServerDelay):
		return waitByLimiter
	case e.ServerDelay > e.Backoff:
		return waitByServer
	}
	return waitByBackoff
}

// AttemptFrom returns the 1-based number of the attempt whose fn received
// ctx, or a context made from it, when the call's Policy has AttemptInContext
// set: for work that logs its attempt, sets an attempt header, or records
// OpenTelemetry's http.request.resend_count (AttemptFrom(ctx)-1). With loops
// nested, the innermost loop that numbers its attempts counts. It returns 1
// for a context that no retry loop numbered (nil included): the first
// attempt, as far as anything can tell.
//
// retryhttp numbers its attempts always, so AttemptFrom(resp.Request.Context())
// tells which attempt produced a response it returned.
func AttemptFrom(ctx context.Context) int {
	if ctx == nil {
		return 1
	}
	if n, ok := ctx.Value(attemptKey{}).(interface{ attemptNumber() int }); ok {
		return n.attemptNumber()
	}
	return 1
}

// HedgeWon reports whether ctx is the context that Observe received with
// the Done event of a call that a hedge won: the call succeeded, and the
// attempt that won it started as a hedge (see Policy.HedgeDelay). It is false for
// every other context and event. With it an observer counts the calls that
// hedges won, which the events alone cannot tell apart when calls share a
// context.
func HedgeWon(ctx context.Context) bool {
	won, _ := ctx.Value(hedgeWonKey{}).(bool)
	return won
}

// hedgeWonKey is the context key under which Observe learns that a hedge won.
type hedgeWonKey struct{}

// attemptKey is the context key under which Do numbers its attempts.
type attemptKey struct{}

// numberedCtx is the context Do gives fn once it numbers the attempts: the
// caller's, with the current attempt's number. One is made per call and its
// number moves on with each attempt, so it is atomic: a goroutine that fn
// started may still read it.
type numberedCtx struct {
	context.Context
	n atomic.Int64
}

func (c *numberedCtx) attemptNumber() int { return int(c.n.Load()) }

func (c *numberedCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// eventQueue carries the events of a call whose decisions are made on
// another goroutine (a hedged call, once a hedge is due) to the goroutine
// that called Do, in order, so that Observe always runs there.
type eventQueue struct {
	mu     sync.Mutex
	q      []Event
	signal chan struct{} // one pending wake-up at most
}

func newEventQueue() *eventQueue { return &eventQueue{signal: make(chan struct{}, 1)} }

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.q = append(q.q, e)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take moves the events queued so far into buf, and returns it.
func (q *eventQueue) take(buf []Event) []Event {
	q.mu.Lock()
	buf = append(buf[:0], q.q...)
	q.q = q.q[:0]
	q.mu.Unlock()
	return buf
}
