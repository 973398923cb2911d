package retry

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter paces attempts: with one in a [Policy], every attempt of a call,
// the first included, starts only once the Limiter has booked it. One
// Limiter shared by every call to a dependency caps the attempts that reach
// it, retries included, whatever the calls' own schedules. [RateLimiter]
// makes one of a *rate.Limiter, for one process; the modules retrypg and
// retryredis share one limit between processes.
//
// The loop books each attempt before it waits for it, so that it knows when
// the attempt may start and stops at once, rather than sleeping, when that
// would be too late for the caller's deadline. It gives a booking back, with
// Cancel, whenever its attempt will not happen: the attempt would not fit
// before the deadline, the Budget refused the retry, the caller's context
// ended during the wait, or the attempt would start later than the booking
// holds (see [Reservation].Slack): a retry whose wait ends long after its
// slot, or a wait that ended late (a stalled process), in which case it
// books again when the wait is over. Reserve and Cancel are called on the goroutine that called
// [Do]; a Limiter must be safe for concurrent use by any number of them.
type Limiter interface {
	// Reserve books one attempt to start at t or later and returns the
	// booking. ctx is the caller's: a Limiter that needs a round trip ends
	// it when ctx ends, and the loop counts the time Reserve takes against
	// the caller's deadline. Reserve must not wait for the attempt's turn
	// itself: it says when that is. An error means no attempt can be booked
	// (a limiter that can never grant one, a store that is down and set to
	// fail closed): the call stops, with the error as its Reason.
	Reserve(ctx context.Context, t time.Time) (Reservation, error)

	// Cancel gives r back, because its attempt will not start. It is called
	// also after the caller's context has ended, so a Limiter that needs a
	// round trip bounds it by its own short timeout.
	Cancel(r Reservation)
}

// Reservation is a [Limiter]'s booking of one attempt. The loop reads Start
// and Slack, and hands the whole value back to Cancel.
type Reservation struct {
	// Start is the earliest time the attempt may start. The loop starts it
	// at the later of Start and the time it asked for.
	Start time.Time

	// Slack is how much later than Start an attempt may still start on this
	// booking. A booking that comes further ahead of its attempt than that
	// (a retry whose backoff outlasts it) is given back at once and booked
	// again when the wait is over, and an attempt whose wait ends too late
	// (its process stalled, or its goroutine waited for a CPU) books again
	// from the time it woke, so that attempts held up together, or waiting
	// alike, do not start together in a burst above the limit. 0 means no
	// limit: the booking holds however late its attempt starts.
	Slack time.Duration

	// Handle is the Limiter's own record of the booking, for Cancel; the
	// loop only carries it.
	Handle any
}

// RateLimiter returns a [Limiter] that books attempts on lim, a token bucket
// of one process: each attempt takes one of its tokens. A nil lim gives a
// nil Limiter (no pacing). lim may also be used by other code at the same
// time, and changed with SetLimit or SetBurst: each booking reads it afresh.
//
// A booking takes its token when it is made, at the current time, even for
// an attempt planned later (a retry's backoff): a token freed during the
// backoff then costs no second wait, and the limiter's clock never moves
// back. Every booking has for Slack the time lim takes to refill its burst
// (at least 1ms): the loop gives back at once a booking whose token comes
// that much before the attempt's planned start, and books again when the
// wait is over, so that calls that fail together and wait the same time (a
// constant backoff, a server's Retry-After) start no faster than lim
// allows, and a stall never releases more than a burst at once. A booking
// given back before its time returns its token, as rate.Reservation.Cancel
// does; a zero-delay booking given back at once (the Budget refused the
// retry) returns it too.
//
// A burst of 0 (the zero rate.Limiter included), or a rate of 0 or less once
// the burst is spent, stops every call with an error that says no attempt
// can ever start.
func RateLimiter(lim *rate.Limiter) Limiter {
	if lim == nil {
		return nil
	}
	return &rateLimiter{lim: lim, mu: lockOf(lim)}
}

// rateLimiter is the Limiter made by RateLimiter.
type rateLimiter struct {
	lim *rate.Limiter
	mu  *sync.Mutex // the lock every rateLimiter of lim shares
}

// Reserve takes a token from lim at the current time, read while holding a
// lock of lim's own, so that no goroutine of this process gives lim a time
// older than one it has already been given. x/time/rate moves its clock
// back when it is given such a time (golang/go#65508), and then admits more
// than its rate: with 200 goroutines on 2 CPUs, times read before waiting
// for lim's mutex let through well over twice the limit.
func (l *rateLimiter) Reserve(context.Context, time.Time) (Reservation, error) {
	l.mu.Lock()
	now := time.Now()
	r := l.lim.ReserveN(now, 1)
	l.mu.Unlock()
	if !r.OK() {
		return Reservation{}, errLimiterBurst
	}
	d := r.DelayFrom(now)
	if d == rate.InfDuration {
		l.cancel(r, now)
		return Reservation{}, errLimiterRate
	}
	// Every booking has a Slack, one granted at once too: a retry that
	// waits its backoff on a token taken now would start later than its
	// slot, together with every other call that failed when it did.
	return Reservation{Start: now.Add(d), Slack: l.slack(), Handle: r}, nil
}

// Cancel gives the token back at the current time, or at the booking's own
// time if that has passed: x/time/rate restores nothing for a reservation
// cancelled after its time, which would keep the token of every zero-delay
// booking given back at once. Cancelling at the booking's time restores at
// most its one token, less those booked after it, as rate.Reservation.CancelAt
// computes.
func (l *rateLimiter) Cancel(r Reservation) {
	res, ok := r.Handle.(*rate.Reservation)
	if !ok {
		return
	}
	l.mu.Lock()
	t := time.Now()
	if t.After(r.Start) {
		t = r.Start
	}
	res.CancelAt(t)
	l.mu.Unlock()
}

// cancel cancels res at now, under lim's lock.
func (l *rateLimiter) cancel(res *rate.Reservation, now time.Time) {
	l.mu.Lock()
	res.CancelAt(now)
	l.mu.Unlock()
}

// slack returns the time lim takes to refill its burst, at least 1ms: an
// attempt later than that by its booking would, with others as late, start
// in a burst larger than lim allows. An unlimited lim has no slack limit.
func (l *rateLimiter) slack() time.Duration {
	limit := l.lim.Limit()
	if limit == rate.Inf || limit <= 0 {
		return 0
	}
	s := float64(l.lim.Burst()) / float64(limit) * float64(time.Second)
	if s >= math.MaxInt64 {
		return 0
	}
	return max(time.Duration(s), time.Millisecond)
}

// limiterLocks are shared by all limiters, each limiter always using the
// same one: a lock per limiter would need a map, and a limiter that shares
// its lock with another only waits a little longer for it.
var (
	limiterLocks [64]struct {
		sync.Mutex
		_ [56]byte // one lock per cache line
	}
	limiterSeed = maphash.MakeSeed()
)

func lockOf(lim *rate.Limiter) *sync.Mutex {
	return &limiterLocks[maphash.Comparable(limiterSeed, lim)%uint64(len(limiterLocks))].Mutex
}

var (
	errLimiterBurst = errors.New("retry: Limiter's burst is 0: no attempt can ever start")
	errLimiterRate  = errors.New("retry: Limiter's rate is 0 or less and its burst is spent: no attempt can ever start")
)
