package retry

import (
	"context"
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

	// Classifier decides which errors are worth another attempt; Undecided
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

	// Concurrency, when set, bounds the attempts in flight at once across
	// every call that shares it: each attempt, the first, each retry and
	// each hedge, holds one of its slots while it runs (see
	// [Concurrency]). The slot is taken last, once the attempt would
	// start at once; the wait for it counts against the caller's deadline
	// and in Event.Waited, and a call that finds none in time stops with
	// [ErrNoSlot]. A hedge that finds no free slot at once does not start,
	// and the hedging ends: a hedge is worth its load only when it starts
	// on time. nil means no bound.
	Concurrency Concurrency

	// Breaker, when set, is asked before every attempt, and told how each
	// ended: while it refuses, the call stops with [ErrBreakerOpen] before
	// any attempt, deposit, booking or wait (see [Breaker]). nil means no
	// breaker.
	Breaker Breaker

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

	// HedgeDelay, when set, hedges the call: when no attempt has ended
	// HedgeDelay.Delay(n, prev, u) after the last one started (n is 1 for the
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
	// OutcomeUnknown says so. A HedgeDelay that also has a method
	// Learn(d time.Duration, err error) is told how each attempt ended that
	// the call did not cancel, so that its delay can follow the latencies of
	// the calls that share it (see package adaptive).
	//
	// Each attempt runs on the goroutine that called Do, as without
	// hedging, until a hedge comes due beside it: only then do goroutines
	// start, one per further attempt (and one to run the call), each ended
	// before Do returns; Observe still runs on the caller's goroutine. A
	// call whose first attempt answers before the hedge delay starts none,
	// and costs a timer and a few allocations more than without hedging.
	// The attempt that wins keeps its context, as without hedging: a value
	// bound to it (a response body) can be read after Do returns; only the
	// losers' contexts are cancelled. A booking for a hedge is asked for
	// off the call's path: an attempt that wins meanwhile ends the call at
	// once, and the booking, no longer needed, is given back. fn must be
	// safe for concurrent calls, and must return when its context ends. A
	// panic in one attempt cancels the others, and propagates from Do once
	// they have returned.
	//
	// Hedge only work that is safe to do twice: work declared [Sequential]
	// or [Once] is never hedged, whatever HedgeDelay says. nil means no
	// hedging.
	HedgeDelay Backoff

	// MaxInFlight is the most attempts of one call in flight at once when
	// HedgeDelay is set. 0 means 2: the first attempt and one hedge.
	MaxInFlight int

	// AttemptInContext, when true, gives fn a context that carries the
	// attempt's number, which [AttemptFrom] reads: for work that logs its
	// attempt, sets an attempt header or records a resend count. It costs
	// one allocation per call. false means fn runs on the caller's own
	// context, and AttemptFrom finds no number there.
	AttemptInContext bool

	// NumberAttempts is the former name of AttemptInContext: either one
	// set gives fn a numbered context.
	//
	// Deprecated: Use AttemptInContext. NumberAttempts read as a count;
	// it goes before v1.
	NumberAttempts bool

	// Hedge is the former name of HedgeDelay, which is read first: Hedge
	// counts only when HedgeDelay is nil.
	//
	// Deprecated: Use HedgeDelay. Hedge read as a switch where it is the
	// delay before each hedge; it goes before v1.
	Hedge Backoff

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

// Sequential and Once are Options that declare what the work of one call
// may bear, for work that is not safe to run twice at once. Without either,
// the work counts as idempotent: it is retried as the Policy says, and
// hedged when the Policy hedges. The core decides it here, for Do and every
// adapter alike: work declared Sequential or Once is never hedged, whatever
// the Policy's Hedge, so that it is never in flight twice.
//
// Sequential work may run again once an attempt has ended, but never beside
// another: a transaction retried whole (retrysql, retrypg), a request whose
// idempotency key makes a repeat safe but whose server refuses a key still
// in flight (retryhttp), a stream.
//
// Once work must not run again after an attempt that may have taken effect:
// a failure the Policy would otherwise retry stops the call after one
// attempt with [ErrNotIdempotent], unless the error gives its own reason
// (its Unrepeatable method, see [Do]). Use it for a non-idempotent call that
// has no idempotency key: a retry could do it twice.
//
// A later Sequential or Once replaces an earlier one; a Policy does not
// change it.
var (
	Sequential Option = repeatRule(1)
	Once       Option = repeatRule(2)
)

// repeatRule is what the work of a call may bear: 0 any number of attempts, at
// once too; 1 one at a time (Sequential); 2 one that may have taken effect,
// no more (Once).
type repeatRule uint8

func (repeatRule) option() {}

// policyInto applies the options in order into p, a zero Policy, and says
// what the work may bear. It is a type switch, not an interface method
// taking *Policy, so that the policy stays on the caller's stack, and it
// writes the policy where the call keeps it, so that it is copied once.
func policyInto(p *Policy, opts []Option) repeatRule {
	var r repeatRule
	for _, o := range opts {
		switch o := o.(type) {
		case Policy:
			*p = o
		case *Policy:
			if o == nil {
				*p = Policy{}
			} else {
				*p = *o
			}
		case repeatRule:
			r = o
		}
	}
	p.undeprecate()
	return r
}

// undeprecate moves what the deprecated fields say into the fields that
// replaced them, so that the loop reads only those.
func (p *Policy) undeprecate() {
	if p.HedgeDelay == nil {
		p.HedgeDelay = p.Hedge
	}
	p.AttemptInContext = p.AttemptInContext || p.NumberAttempts
}
