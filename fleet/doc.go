// Package fleet shares one rate limit between the processes of a fleet
// (service replicas, queue workers): a [Limiter] is a [retry.Limiter] whose
// slots come from a [Store] that every process reaches, so a provider that
// takes 200 attempts a second sees at most that (plus the burst) from the
// whole fleet, retries included, however many processes there are. The
// modules retrypg (PostgreSQL, through pgx) and retryredis (Redis, through
// go-redis) provide the stores:
//
//	lim, err := retryredis.NewLimiter(client, "provider", 200, 20, nil)
//	if err != nil {
//		return err // the error names the field: an empty name, a rate or burst that admits nothing
//	}
//	policy := retry.Policy{Limiter: lim, Budget: retry.NewBudget(0.1, 10.0/4)}
//
// This package holds what the stores share: the booking algorithm, the
// batching, the timeout and what happens when the store is slow or down.
//
// A [Concurrency] bounds the attempts in flight at once across the fleet,
// where a Limiter bounds how many start a second: each attempt holds a
// lease in a [SlotStore] while it runs, renewed in the background, so that
// the slots of a process that dies come back within a lease:
//
//	slots, err := retryredis.NewConcurrency(client, "provider", 50, 10*time.Second, nil)
//	if err != nil {
//		return err // an empty name, a limit below 1, a lease below 1ms
//	}
//	policy := retry.Policy{Limiter: lim, Concurrency: slots}
//
// # The schedule
//
// A store keeps one time per limit, the end of its schedule (GCRA's
// theoretical arrival time, TAT), on its own clock. With an emission
// interval T = 1/rate and a tolerance tau = (burst-1)*T, a booking of n
// slots, none earlier than t0 = now + after, takes
//
//	base = max(TAT, t0);  slot i at max(t0, base + i*T - tau);  TAT = base + n*T
//
// in one atomic step on the store, and answers base - now: a duration from
// the store's now, never a time, so processes whose clocks disagree share
// the limit. Every slot is a conforming cell of GCRA: the i-th booked slot
// is no earlier than its TAT less tau, and each moves the TAT on by T. So
// over any window of length W, the slots in it number at most W*rate +
// burst: if m slots fall in [a, a+W], the TAT after the first of them is at
// least a + T, each later one adds T, and the last is no earlier than its
// TAT less tau, so a + (m-1)*T - tau <= a + W. That holds whatever the
// order in which processes book, and for slots booked ahead.
//
// A process books several slots per round trip when it will use them (see
// [Limiter]) and hands them out itself: they keep their places on the
// schedule, so the bound holds. A slot that passes unused is lost.
//
// A refund moves the TAT back, which is safe only if no slot was booked
// after the ones given back: those keep their places, so the TAT moved back
// under them would book the same places twice (refund the middle of three
// slots booked one per interval, and the next booking lands on the third
// one's place). So a store takes slots back only from the last booking (see
// [Store].Refund); a slot it cannot take back is lost, not lent.
//
// # Late starts
//
// The bound is for slots that start at their places. A process knows the
// store's now only within a round trip: the store read its clock after the
// request left and before the answer came. Placed by when the answer
// arrived, as the first version of this package placed them, a slow answer
// moved its batch onto places that bookings with fast answers already held:
// three processes sharing 1,000/s with a burst of 5, whose answers took 0
// to 90ms to come back, started up to 181 attempts in 100ms where the bound
// is 105. A process now places the store's now as late as it can have
// been, so that no slot starts before its place, and knows how much later
// than its place a slot may start, w: from a plain [Store], the booking's
// round trip; from a [ClockedStore], the width of the bounds that all its
// round trips set on the offset between the two clocks (see [Limiter]).
// Each booking then leaves the schedule free after its batch for
// pad = max(0, w - T), which the process asks for along with its slots (see
// [Schedule]). A slot used starts late by at most pad + T, and T more for
// each slot its batch leaves unused at its end: a batch whose round trip
// or bounds outgrew its pad, or some of whose places passed while
// the answer was on its way (a slot that passed by at most T starts at
// once, one that passed by more goes unused), gives up as many of its last
// slots as that takes. Within a batch the slots keep their spacing, but for
// those that passed, which are at most T late against the later ones. So
// for used slots k before j in the store's order, with u used slots after k
// up to j, the starts satisfy a_j >= a_k + (u-1)*T - tau: the schedule
// places j after k's place by T for each slot from k up to j (used or
// not) and the pads between, less tau, and k's lateness takes at most
// those pads, the unused slots' intervals and one interval, the -1. So m
// starts within [a, a+W) satisfy (m-2)*T - tau < W: fewer than
// W*rate + burst + 1, that is at most W*rate + burst when W*rate is whole
// (as for windows of 100ms and 1s at 200/s or 1,000/s), and rounded up
// otherwise. That holds whatever the round trips take, on the way out or
// back. The pads cost the schedule only while w is wider than an interval
// (a link whose delays vary, or the first round trips): see [Limiter] for
// how a process keeps them small.
//
// An attempt may also start later than its slot because its process
// stalled, or its goroutine waited for a CPU. The loop starts an attempt
// at the later of its planned time and its slot, and books again when it
// wakes more than the Slack (the time the rate takes to refill the burst)
// after it: so a stalled process adds at most a burst to a window. A retry
// planned further ahead than the tolerance is booked at most that far
// ahead (a booking far ahead would move the TAT there and hold up the whole
// fleet); the loop gives that booking back and books again when the
// retry's wait is over, so retries that wait alike, a server's Retry-After
// or a constant backoff, do not start together above the limit.
//
// # When the store is slow or down
//
// Each round trip may take Options.Timeout (100ms by default), and no
// booking waits past its caller's deadline; the Limiter stops waiting at the
// timeout even for a client that ignores its context (go-redis does, unless
// ContextTimeoutEnabled). A store that does not answer in time, or fails,
// is left alone for a pause, and then asked again by one booking (the
// others are served as during the pause until it answers): 10ms at first,
// 1.5 times longer with each failure in a row, up to 100ms, less a random
// part of up to half. So a store that restarts in 100ms costs little more
// than that (the probe that finds it back comes at most 76ms after it is),
// one away for longer at most 100ms more than its absence, and a store
// that stays down is asked 10 to 20 times a second by each process that
// has calls to make. Meanwhile the slots the
// process already holds are still handed out, and then, by default, the
// Limiter fails closed: the call stops, its error says "fleet: limiter
// store unavailable" with the store's own error, and the provider sees
// nothing from it. Failing closed is the default because the limiter exists
// to protect the provider: an outage of the store must not turn into an
// unannounced multiple of the rate, and a caller that prefers to go on says
// by how much.
//
// With Options.Fallback set to a share, each process books on a local
// limiter at that share of the rate (and of the burst, at least 1) instead:
// 1/N for N processes keeps the fleet at the rate. The fallback books no
// earlier than the end of the schedule as the process last saw it, so the
// attempts booked on the store before it failed and those of the fallback
// do not add up; and once the store answers again, its first booking is no
// earlier than the fallback's last, for the same reason. So the provider
// sees at most N times the share, plus the bursts, while the store is down,
// and across each switch the limit, plus the bursts and what the processes'
// views of the schedule's end differ by (at most a batch each): in
// TestLimiterFallsBackToAShareOfTheRate, at most 119 attempts in a second
// against a limit of 100 with a burst of 8, where 4 processes each falling
// back to the whole rate would have let through 400.
//
// A store that loses its state (a Redis restarted without persistence)
// starts a new schedule: slots booked ahead on the old one then overlap the
// new one's for as long as they reach ahead.
//
// # Budgets across processes
//
// A retry budget made by [retry.NewBudget](ratio, minPerSecond) has two
// parts, and they behave differently in a fleet. The ratio composes by
// itself: each process earns ratio retries per call it makes, so N processes
// earn ratio of the fleet's calls, the same share whether one process makes
// all the calls or N share them. The floor does not: each process may also
// retry minPerSecond times a second whatever its traffic, so the fleet may
// retry N*minPerSecond times a second. Over 10s of 200 calls a second that
// all fail (TestBudgetAcrossProcesses), NewBudget(0.1, 10) let one process
// making all the calls retry 30.9 times a second (20 from the ratio, 10.9
// from the floor, its burst of 10 included); four processes making 50 each,
// each with the same budget, retried 63.6 times a second: the same 20 from
// the ratio, and 43.6 from four floors (40 a second and four bursts).
// NewBudget(0.1, 10.0/4) in each process brought the fleet back to 30.8.
//
// So divide the floor by the number of processes. The shared limiter gives
// no clean way to make the floor fleet-wide: the floor is a rate.Limiter
// inside [retry.TokenBucket], and [retry.Budget]'s Withdraw takes no context
// and must answer at once, so it cannot make a round trip; and pre-booking
// floor tokens from a store would spend the fleet's floor on the processes
// that asked first, and waste it in those that stop. The floor is a small
// allowance for quiet callers; the shared Limiter is what bounds what the
// provider sees, retries included.
package fleet
