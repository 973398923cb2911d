// Package retry calls a function again when it fails for a reason that may
// pass, and stops as soon as another attempt is pointless or unaffordable.
//
// It stops at once on errors that another attempt cannot fix (a cancelled
// context, a bad certificate, most 4xx statuses) and retries the others. It
// waits a capped exponential backoff with jitter between attempts, never
// starts an attempt earlier than a server asked for (Retry-After), can share
// a retry budget and a rate limiter between calls, and never waits past the
// caller's deadline: when the next attempt could not start in time it stops
// at once. The error it returns always keeps the last attempt's error.
//
// # Quick start
//
// [Do] calls fn until it succeeds or the [Policy] says stop. With no options
// it makes at most 4 attempts, waits [Exponential]{} (100ms doubling up to
// 10s, full jitter) between them, and retries what [DefaultClassifier] does
// not rule out:
//
//	err := retry.Do(ctx, func(ctx context.Context) error {
//		return client.Ping(ctx)
//	})
//
// fn receives the attempt's context; use it for the work. [DoValue] returns
// the value of the attempt that succeeded. A [Policy] is a plain value, so
// one declared at package level serves every goroutine without locks:
//
//	var apiPolicy = retry.Policy{
//		MaxAttempts:    5,
//		Backoff:        retry.Exponential{Base: 500 * time.Millisecond, Cap: 30 * time.Second},
//		Budget:         retry.NewBudget(0.1, 10),
//		Limiter:        retry.RateLimiter(rate.NewLimiter(200, 20)),
//		AttemptTimeout: 2 * time.Second,
//	}
//
//	user, err := retry.DoValue(ctx, func(ctx context.Context) (User, error) {
//		return api.User(ctx, id)
//	}, apiPolicy)
//
// Every field's zero value is its default. Options apply in order and a later
// Policy replaces an earlier one whole: fields are never merged, so what you
// pass is what runs.
//
// # Choosing delays
//
// A [Backoff] is a pure function from the retry number, the previous wait and
// one uniform draw u in [0, 1) to the next wait. It holds no state, so one
// value serves every call.
//
// [Exponential] is the default. Before retry n its ceiling is
// min(Cap, Base * Multiplier^(n-1)); the zero value means Base 100ms, Cap 10s
// and Multiplier 2, so the ceilings run 100ms, 200ms, 400ms, ... 6.4s, 10s,
// 10s. The cap applies before jitter, so no wait ever exceeds Cap. The
// [Jitter] draws the wait from the ceiling c:
//
//   - [FullJitter] (the zero value) waits anywhere in [0, c): it spreads
//     clients that failed together best.
//   - [EqualJitter] waits in [c/2, c): every retry keeps at least half of the
//     exponential wait.
//   - [NoJitter] waits exactly c; use it only when a single client talks to
//     the dependency.
//
// [Decorrelated] draws each wait from the previous one,
// min(Cap, Base + u*(3*prev - Base)), with the same 100ms and 10s defaults.
// [Constant] waits the same time before every retry, without jitter: for
// polling, and for tests. Constant(0) retries at once.
//
// [Policy].MaxAttempts counts every attempt, the first one included: 1 means
// no retry, 0 means 4, and a negative value means no count limit (the context
// still bounds the loop). Policy.Rand supplies u; it defaults to
// [math/rand/v2.Float64].
//
// # Which errors are retried
//
// After a failed attempt Do first stops if the caller's context is done.
// Then [Permanent] and [Transient] markers decide, whatever the classifier
// says (the outermost marker wins, and errors.Is still reaches the marked
// error). Otherwise Policy.Classifier decides, [DefaultClassifier] when nil:
//
//   - context.Canceled from fn stops; context.DeadlineExceeded from fn (an
//     attempt's own timeout) retries.
//   - An error that already came out of a retry loop (an [*Error] from a
//     nested Do or from retryhttp) stops: retry at one layer (see below).
//   - A request net/http refuses to send (an unsupported scheme, an invalid
//     header or method) stops.
//   - TLS and certificate verification errors, and DNS "no such host", stop.
//   - A [*ResponseError] (see [CheckResponse]) with status 408, 429, 500,
//     502, 503 or 504 retries; 501 and any other 4xx stop; other 5xx are
//     Undecided.
//   - A database error with a SQLSTATE (pgx, lib/pq): serialization
//     failures, deadlocks, connection exceptions and shutdowns retry (retry
//     the whole transaction); data, integrity and syntax errors stop.
//     driver.ErrBadConn retries.
//   - Connection reset, refused or aborted, a broken pipe,
//     io.ErrUnexpectedEOF and network timeouts retry.
//   - Anything else is [Undecided].
//
// Undecided means retry, as in most Go retry packages. A Classifier replaces
// the default rules; [Classifiers] composes several, the first with an
// opinion answering, so a policy can extend the defaults and end with a
// classifier that says [Stop] to retry only what it knows:
//
//	retry.Classifiers(mine, retry.DefaultClassifier, func(error) retry.Decision { return retry.Stop })
//
// Do cannot know whether fn is safe to repeat. Whether work is idempotent is
// the caller's decision: retry only work that is, or work protected by an
// idempotency key.
//
// # Retry at one layer
//
// Retries multiply across layers: a client, a gateway, a service and a
// driver making 3 attempts each turn one action into 81 calls to the
// database, exactly when it is failing. So an error that comes out of one
// retry loop is not retried by another that wraps it: an outer Do stops at
// once on an inner Do's [*Error], whatever made the inner loop stop, and on
// a response that retryhttp returned after giving up. To retry at two layers
// on purpose, wrap the inner error with [Transient].
//
// # Deadlines
//
// The caller's context bounds everything: no attempt starts after it is
// done, and a wait ends when it does. Before every wait, the limiter's wait
// for the first attempt included, Do checks that the next attempt would start
// at least [Policy].MinAttemptTime (default 0) strictly before the deadline.
// If not, it stops at once with [ErrNoTimeLeft] instead of sleeping into the
// deadline. [errors.Is](ErrNoTimeLeft, [context.DeadlineExceeded]) is true, so
// one check covers both ways of running out of time.
//
// Policy.AttemptTimeout bounds each attempt: fn's context ends at the
// earlier of the attempt's start plus AttemptTimeout and the caller's
// deadline. When both end together, the caller's context wins and Do stops.
//
// # Budgets and limiters
//
// When a dependency fails for everyone, retries multiply its load. A
// [Budget] shared by every call to the same dependency caps that: each call
// deposits once, each retry must withdraw, and a refused retry stops the call
// at once with [ErrBudgetExhausted]. The first attempt is never refused.
// [NewBudget](0.1, 10) allows retries for about 10% of calls, plus 10 retries
// per second so that quiet callers can still retry. It starts empty, and
// its bucket is lock-free. Make it once and share it through the Policy: a
// budget made for each call would limit nothing.
//
// Policy.Limiter paces every attempt, the first and the retries alike: a
// [Limiter] books each attempt before it waits, so that the deadline is
// checked before any wait, and gets the booking back when the attempt will
// not happen. [RateLimiter] makes one of a [golang.org/x/time/rate.Limiter]
// for one process; retrypg and retryredis share one limit between the
// processes of a fleet. Its wait runs on the same timer as the backoff: the
// next attempt starts after the longer of the two, and that time too must
// fit before the deadline.
//
// # Concurrency limits and circuit breaking
//
// A rate does not bound how many attempts are in flight: when a dependency
// slows down, the same rate means more requests waiting in it, its queues
// grow and its latency climbs until everything times out. Policy.Concurrency
// bounds that. Each attempt, the first, every retry and every hedge, holds
// one slot of a [Concurrency] while it runs, taken last, once its backoff,
// its Limiter booking and its Budget are settled: so a slot is never held
// through a wait, and a booking is never kept while waiting for a slot (a
// booking that the wait made too late is booked again). [ConcurrencyLimit]
// is a fixed limit, first come first served, with an optional bounded
// queue; package adaptive learns the limit from latency; retrypg and
// retryredis lease slots to a fleet. The wait for a slot counts against the
// deadline and in Event.Waited; a call that finds none in time stops with
// [ErrNoSlot], keeping the last attempt's error.
//
// Policy.Breaker stops the attempts to a dependency that is failing for
// everyone. A [Breaker] is asked before every attempt; while it refuses, a
// call stops before it deposits, books or waits, with a Reason that Is
// [ErrBreakerOpen] and says, with its Until method, when the breaker may let
// an attempt through (a queue schedules the work for then); a call already
// retrying stops at its next attempt. [CircuitBreaker] opens after a run of
// failures or a failure ratio over a window, and lets probes through once
// its open time is over. Only failures the classifier would retry count: a
// 404 or the caller's own cancel says nothing of the dependency.
//
// The order of admission, for each retry: when it is planned, the Breaker
// is asked whether it would still refuse at the planned time (then the call
// stops at once, before it books or waits), the Limiter books it, and the
// Budget grants it, last, so that a retry refused for any other reason
// costs no token; once its wait is over, it takes its slot, and last the
// Breaker's leave. The slot comes after the wait so that it is never held
// through a backoff; the leave comes last so that a half-open breaker's
// few probes go only to attempts that start at once. A first attempt does
// the same without the Budget's grant (it deposits, once it may start).
// After an attempt ends, the Breaker is told, then the slot given back,
// each exactly once, however the attempt ended (a panic, a hedge cut, a
// caller who gave up). Work run outside Do (a queue's worker) gets the same
// through [Policy.Admit].
//
// # Hedging
//
// Retrying answers failures; a call that is merely slow waits on. With
// Policy.HedgeDelay set, a call whose attempt has not answered after a delay
// starts another beside it, up to Policy.MaxInFlight at once, and takes the
// first success, cancelling the others: the tail of the latency shrinks for
// a little extra load. Hedges are attempts: MaxAttempts counts them, the
// Limiter paces them, the Budget must grant each (so a struggling dependency
// gets no extra load), and none starts that would not fit before the
// deadline. Hedge only work that is safe to do twice: work declared
// [Sequential] (a transaction) or [Once] is never hedged, and the adapters
// declare theirs (retrysql and retrypg transactions, retryhttp requests
// with an idempotency key, gRPC streams). The winner keeps its context;
// only the losers are cancelled, and a loser's value that closes is closed.
//
// One scheduler runs every call. Sequential retries are hedging with one
// attempt in flight: each attempt runs on the caller's goroutine, and only
// once a hedge comes due beside one do the others run on goroutines of
// their own, with the same rules deciding every attempt, wait, booking and
// stop. A call that does not hedge never starts a goroutine.
//
// # Server-requested delays
//
// An error can carry the delay a server asked for: [CheckResponse] turns an
// HTTP response into a [*ResponseError] that reads Retry-After (seconds or an
// HTTP-date, see [ParseRetryAfter]) and the retry-after-ms headers, then the
// IETF RateLimit fields (the wait until an exhausted policy is restored),
// then X-RateLimit-Reset; its doc has the table of headers, their forms and
// their precedence. [RetryAfter] attaches a delay to any error. Do then
// waits the longer of the backoff and that delay: it never retries earlier
// than asked, and never clamps the delay. A delay above
// [Policy].MaxRetryAfter (default 5 minutes) stops the call at once with
// [ErrServerDelay]; one that would pass the deadline stops it with
// ErrNoTimeLeft. A malformed header is ignored, as if absent: it can neither
// shorten a wait nor stop a call.
//
// A server can also say whether to retry at all: x-should-retry: true or
// false overrides the status rule both ways, but never makes a request that
// is not idempotent retryable. The ResponseError keeps the quota the server
// says is left, and its policy, for logs and for a limiter that adapts.
//
// For HTTP clients, package [github.com/seed93a044d1/retry/retryhttp] does all
// this in an [net/http.RoundTripper]: it retries only requests that are safe
// to repeat, and returns the last real response when retrying ends on a status.
//
// # Errors
//
// Every failure is an [*Error]. Its Reason says why Do stopped:
// [ErrExhausted], [ErrNotRetryable] (the error's nature),
// [ErrAlreadyRetried] (an inner loop has retried it), [ErrNotIdempotent] (a
// rule of safety), [ErrBudgetExhausted], [ErrServerDelay], [ErrNoTimeLeft], or
// the caller's context.Cause(ctx). Its Last holds the last
// attempt's error, whatever the reason, a cancelled or expired context
// included; it is nil only if no attempt was made.
// Both are reachable with errors.Is and errors.As:
//
//	if errors.Is(err, retry.ErrBudgetExhausted) { ... } // why it stopped
//	if errors.Is(err, io.ErrUnexpectedEOF) { ... }      // what the last attempt returned
//	var re *retry.Error
//	if errors.As(err, &re) && re.OutcomeUnknown { ... }
//
// errors.Is(err, context.DeadlineExceeded) holds both when the call ran out
// of time and when it stopped for another reason after an attempt that timed
// out, since the last error is reachable too. To tell them apart, ask the
// Reason:
//
//	var re *retry.Error
//	if errors.As(err, &re) && errors.Is(re.Reason, context.DeadlineExceeded) { ... } // out of time
//	if errors.As(err, &re) && errors.Is(re.Last, context.DeadlineExceeded) { ... }   // the last attempt timed out
//
// OutcomeUnknown is true when any attempt ended in a way that leaves open
// whether it took effect (a timeout, a reset or aborted connection, a broken
// pipe, an unexpected EOF): the work may have been done although Do failed.
// The function [OutcomeUnknown] holds the rules, for a worker that drives
// [Next] itself; an error can answer for itself with an OutcomeUnknown() bool
// method.
//
// # Observing retries
//
// [Policy].Observe sees every step of a call, with the caller's context so
// that a log line or a span event carries the request's trace: an [Event]
// after each attempt (its number, duration, error, whether the outcome is
// unknown, and, when a retry follows, the wait and what set it), then one
// with Done set when the call ends (attempts made, time taken, the stop
// reason). With no hook set a call pays nothing for it. Work that wants its
// attempt number (for a log line or an attempt header) sets
// Policy.AttemptInContext and calls [AttemptFrom] with the context fn received.
// Package github.com/seed93a044d1/retry/retryotel turns a Policy into one
// that records OpenTelemetry metrics and span events.
//
// # Durable work
//
// A queue worker should not sleep for minutes between attempts of a job. [Next]
// is the decision Do takes after a failed attempt, as a pure function: given
// the policy, the attempt number, the previous wait, the error, the time, the
// job's deadline and a draw u, it returns the wait before the next attempt
// or a stop reason. The worker stores now+wait with the job and runs it
// again then. Next does not touch the Budget or the Limiter; a worker that
// uses them calls them itself, and readies each attempt with [Policy.Admit],
// which waits for the Limiter, takes a Concurrency slot and asks the
// Breaker as Do does.
//
// # Testing code that retries
//
// Do reads the time with [time.Now] and waits on a [time.Timer], so inside a
// [testing/synctest] bubble its waits cost no real time and elapsed times are
// exact:
//
//	func TestFetchRetries(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			start := time.Now()
//			err := retry.Do(t.Context(), flakyTwice, retry.Policy{Backoff: retry.Constant(10 * time.Second)})
//			// err is nil and time.Since(start) is exactly 20s, in microseconds of real time.
//		})
//	}
//
// To check a jittered schedule, seed Policy.Rand (with a source of its own
// for each test: a *rand.Rand is not safe for concurrent use), or call
// Backoff.Delay with chosen u values. Outside a bubble, Constant(0) makes a
// test that retries run at once.
package retry
