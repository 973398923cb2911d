// Package adaptive holds three parts of a [retry.Policy] that learn from
// the calls that share them, so that nothing about the dependency has to be
// configured: a [Limiter] that finds how many attempts a second the
// provider accepts and paces every call to that, a [Concurrency] that finds
// how many attempts may be in flight at once, and a [Hedge] whose delay is
// a quantile of the latencies the calls have seen.
//
//	var (
//		apiLimiter = &adaptive.Limiter{}
//		apiHedge   = &adaptive.Hedge{}
//	)
//	policy := retry.Policy{Limiter: apiLimiter, Budget: retry.NewBudget(0.1, 1)}
//	hedged := retry.Policy{Limiter: apiLimiter, HedgeDelay: apiHedge, Budget: retry.NewBudget(0.05, 1)}
//
// The Limiter and the Hedge learn through a method Learn(d time.Duration,
// err error) that the retry loop calls after each attempt, the Concurrency
// through the release of each slot; none needs more than the standard
// library and the retry package.
//
// # What the Limiter counts as throttling
//
// An attempt is throttled when its error, anywhere in its tree, is a
// *retry.ResponseError with status 429 (Too Many Requests), or 503 with a
// server delay (Retry-After, or its RetryAfter field set by hand), or a
// RateLimit or X-RateLimit-Remaining quota of 0 left (once ResponseError
// carries those fields); or an error with a method Throttled() bool that
// returns true, as retrygrpc's per-attempt error does for
// RESOURCE_EXHAUSTED. A 503 without a delay says the provider is failing,
// not busy, and a timeout says nothing sure: neither changes the rate. The
// Limiter is no circuit breaker: a failing provider is the Budget's to
// answer.
//
// # How the Limiter's rate moves
//
// Until its first throttle, it books every attempt at once: it knows no
// rate, and a provider that never throttles costs one atomic add per
// attempt. From then on it paces, one attempt per slot of 1/rate:
//
//   - A throttle cuts the rate to 0.85 of the peak, the capacity it has
//     measured: the successes of the last second, which is what a saturated
//     provider accepts, and no more than the rate it was sending at. (Before
//     a second of answers has been seen, the rate sent stands in; the next
//     cut measures.) CUBIC cuts to 0.7 of the rate that met the loss; a
//     measured capacity needs less margin, and 0.85 keeps the tests'
//     providers 96% busy instead of 93%, with as few throttles.
//   - One episode cuts once. A throttle causes no cut when its attempt
//     started before the last cut could have taken effect: before the
//     attempts booked at the old rate had all started, before the server's
//     delay had passed, or within a second of the cut (a provider that
//     counts per second refuses for the rest of its window, whatever the
//     client does now). Nor does one that comes while the provider has
//     accepted, over the last second, as much as the current rate. So a
//     burst of 429s from one overload lowers the rate once, not once per
//     429: the client is not punished twice, once by the server's delay and
//     again by the Limiter.
//   - With successes, the rate grows back along a cubic curve, as in TCP
//     CUBIC (RFC 9438): from the cut, peak*(1 - 0.15*(1-g/K)^3) returns to
//     the peak at g = K, g the time with successes since the cut; it is
//     flat near the peak, where it spends the most time, and then rises
//     beyond it, peak*(1 + 0.4*(g/K-1)^3), to find a capacity that has
//     grown. K is 3 seconds, or twice the time bookings wait in the
//     Limiter's queue when that is longer, because news of a booking's rate
//     comes back only once it has been sent. Beyond the peak, the rate is
//     also at most 1.2 times the answers of the last whole second, so it
//     rises by at most a fifth for each round of news and does not grow
//     while the Limiter is idle; once the answers reach three times the
//     peak, the provider has plainly grown, and the bound is twice the
//     answers, as in TCP's slow start.
//   - It never goes below MinRate (default 1 per second), so that it keeps
//     learning. Nothing it lowers stays low: the rate regrows with
//     successes, and every hold ends with time.
//
// Why CUBIC, and why not the others. AIMD (add a constant per second, halve
// on a throttle) grows at the same speed near the peak as far from it, so it
// either finds a doubled capacity slowly or overshoots often; CUBIC spends
// its time near the peak and still probes beyond it. Google SRE's
// client-side throttling (reject locally with probability
// max(0, (requests - K*accepts) / (requests + 1))) sheds load rather than
// pacing it: at its usual K of 2 it lets through twice what the provider
// accepts, so half the attempts of an overloaded client are throttled, and
// a queue of work (a backlog after an outage) fails instead of draining.
// AWS's adaptive retry mode is CUBIC too, and taught this one; it differs
// where that mode has known faults: it cuts at every throttle (a burst of
// 429s compounds to 0.7^n), measures the rate sent rather than accepted,
// uses an absolute constant (0.4 attempts/s^3) that swings small rates
// widely and regrows large ones slowly, and in aws-sdk-go-v2 its retry
// quota never refills (aws/aws-sdk-go-v2#3550). Here the curve is scaled by
// the peak, so a provider of 10 or of 10,000 a second is found as fast, and
// retries are the Budget's, which every call refills.
//
// # How it composes with the loop
//
// The Limiter books through retry.Limiter's Reserve and Cancel, and never
// waits in Reserve. A booking takes the first free slot at or after the
// time its attempt is planned for: now for a first attempt, the end of its
// wait for a retry, that wait being the longer of the backoff and the
// server's delay, as the loop computes it. So a retry after a 429 honours
// the server's delay and then waits only for a free slot, and the 429s of
// one second, all told to come back as the provider's window turns, are
// spread over the slots after it instead of landing in a burst. The loop
// counts the wait against the caller's deadline; a booking that would
// start at or after the deadline takes no slot, and one that would not
// leave MinAttemptTime is given back at once, its slot freed. A retry the
// Budget refuses gives its booking back too. Hedges are paced like any
// attempt.
//
// Callers without a deadline queue without bound when there are more of
// them than the provider serves; the Limiter then adapts at the pace of its
// queue (K stretches with it). Give calls a deadline, and MinAttemptTime.
//
// # Simulation
//
// Reserve and Learn read the clock; ReserveAt(now, t) and LearnAt(now, d,
// err) take the time instead, so that a discrete-event simulation drives
// one Limiter on one goroutine in virtual time (Cancel reads no clock):
//
//	r := lim.ReserveAt(now, now)  // an attempt due now: it starts at r.Start
//	...
//	lim.LearnAt(end, end.Sub(start), err)  // it started at start, ended at end
//
// Virtual times must not go back; the first one given is the Limiter's
// origin (its per-second counters start there).
//
// # The Concurrency
//
// A [Concurrency] keeps as many attempts in flight as fill the dependency
// with a short queue, learnt round trip by round trip. A round is a cohort:
// the first half-the-limit attempts given a slot after it began, and it
// ends when every one of them has ended, not when the first that many
// have (those are the quickest, and would read no queue where there is
// one). Attempts given a slot before it are old news; the attempts the
// loop cut (their error Is context.Canceled: a hedge lost, the caller
// left, a 404) end their attempt but are not learned. So one decision is
// made per round trip, on the attempts the last decision admitted:
//
//   - A round with a throttling answer (the Limiter's kinds) cuts the
//     limit to 0.9 of itself, AIMD's decrease, once.
//   - Otherwise the successes and timeouts of the round tell the queue at
//     the dependency: with n in flight on average and a mean latency of d,
//     it answered n/d a second (Little's law), which kept n*base/d of them
//     in service, base being the mean latency of attempts that do not wait;
//     the rest waited. A mean is noisy: from the spread of the latencies
//     (the round's own, or the base's if wider), the round's mean and the
//     base each have a standard error, and a reading counts only past
//     three of them combined. More waiting than a tenth of n (at least 2,
//     and past the noise) cuts the limit to those served plus 7.5% of them
//     (at least 1.5), but by half at most. Fewer than a twentieth (at
//     least 1), among the attempts that took the last slot the limit
//     allowed, grows it: by 2.5% of n (at least 1), half the width of
//     that band, so one step never jumps over it; each round in a row that
//     grows doubles the step, up to doubling the limit in a round, as TCP's
//     slow start does. A round within the band holds, and the next growth
//     starts again from 2.5%; a cut sets the streak back so that six
//     rounds grow by 2.5% before the step doubles, and a limit near its
//     capacity, or its quota, creeps rather than leaps.
//   - Until the first cut the limit knows nothing: it starts with the step
//     at its largest and grows in every round that reached it and was not
//     cut: 20 slots become 160 in three round trips, and the first cut
//     brings them to what the dependency served. A limit that was not
//     reached, as through an outage whose failures teach nothing or while
//     a circuit breaker lets one attempt through at a time, keeps its step
//     for when it is.
//   - It grows only when the attempts used the slots it had, and by at most
//     a doubling per round trip: a limit that is not reached never rises,
//     and a steady overload is read against a base measured when nothing
//     waited, not against recent latencies that the overload itself
//     raised.
//   - The base is the mean latency of the first rounds, at the initial
//     limit, once they have seen 16 attempts (the limit does not move until
//     then). It is measured again with the limit pinned to half of itself
//     (if the limit is at most twice the capacity, nothing then waits),
//     over a cohort of as many attempts as the pin (16 at least), after
//     16, 32, 64 and 128 rounds, then every 256; the pin costs about one
//     round trip at half the slots. A probe within the noise of the base is
//     pooled with it, the attempts before weighing 256 at most, so the base
//     grows surer while the dependency stays the same; one beyond the noise
//     replaces it. A round whose mean is below the base by more than the
//     noise starts a probe at once. Other failures (a 500, a reset) may come
//     at once and say nothing of the load: they are not learned, and a
//     round or probe of nothing else moves nothing.
//   - It stays within MinLimit and MaxLimit (default 1 and 1000) and
//     starts at InitialLimit (default 20).
//
// Why this and not the others. TCP Vegas, which compares the latency to
// the least one seen, estimates the queue from the least latency of a
// round; against a dependency that serves many at once, the least picks
// the attempt luckiest in the queue and sees a third of it, while means
// obey Little's law, and their noise can be measured. Gradient2 (Netflix's
// concurrency-limits) compares a short-term latency to a long-term average
// and adds a queue allowance every round: under a modest, steady overload
// the long-term average rises to meet the short-term one, the gradient
// stays near 1 and the allowance makes the limit grow without bound
// (Netflix/concurrency-limits#134), and a latency held at a timeout has no
// variation for it to see (concurrency-limits#137). Here the reference is
// a base measured only when nothing waits, as Envoy's adaptive concurrency
// filter re-measures its minimum latency at a pinned low concurrency, and
// growth needs a limit that was reached. AIMD alone, on failures, learns only by
// overloading the dependency until it times out or refuses, so it lives at
// the edge of collapse; it is kept here for throttling answers, which are
// the dependency's own word that it is over its share and often come with
// no rise in latency. Against a storage that serves C writes at once and
// queues the rest (20 ms each, up to 10% more, or up to 50% more), with 3C
// writers, for C of 20, 50, 100 and 200: the limit settles between 0.95C
// and 1.2C, a backlog drains within 1.02 times as long as at the best fixed
// limit, C, and when C halves or doubles, every 5 s window from 5 s after
// the change holds at most 1.3 times the new C in flight and writes at
// least 0.8 of what it serves (the package README has the figures).
//
// # The Hedge
//
// A [Hedge] is a retry.Backoff for Policy.HedgeDelay: the delay before a hedge
// is the Quantile (default 0.95) of the durations of the last
// max(1000, 20/(1-Quantile)) successful attempts it was told of, never
// below Floor (default 10ms, also the delay until 10/(1-Quantile)
// successes have been seen) nor above Cap (default 10s). The successes are
// kept as buckets of a log-linear histogram 1/32 of their value wide, so
// the delay is the quantile rounded up to its bucket's end: at most 3.2%
// above the exact one. Learn holds one short lock; Delay reads two atomics.
//
// The attempts a hedge beat are cancelled, and the loop does not tell of
// them, so the slowest latencies are missing from what the Hedge learns:
// its quantile sits below that of the unhedged latencies, and more than
// 1-Quantile of the calls may hedge. Against a dependency whose attempts
// take 4-6ms 98% of the time and about 1s otherwise, p95 with a 1ms floor
// settles at the top of the fast mode (6.0ms) and costs 5.1% extra
// attempts; the default 10ms floor costs 2.0%. Both cut the p99.9 of the
// calls from 1.09s to 12ms and 16ms (the package README has the figures
// and the command). Pair a Hedge with a Budget, which caps the extra load
// whatever the delay.
package adaptive
