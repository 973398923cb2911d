package retry

import (
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// pace reserves the limiter's token for the next attempt and returns the
// time at which that attempt may start. It stops, giving the token back,
// when the limiter can never grant one (a burst of 0, or a rate of 0 or less
// once the burst is spent), and when the attempt would not start
// minAttempt before the deadline.
func pace(lim *rate.Limiter, minAttempt time.Duration, deadline time.Time) (*rate.Reservation, time.Time, error) {
	r, now := reserve(lim)
	if !r.OK() {
		return nil, now, errLimiterBurst
	}
	d := r.DelayFrom(now)
	if d == rate.InfDuration {
		cancel(lim, r)
		return nil, now, errLimiterRate
	}
	if !fits(now, d, minAttempt, deadline) {
		cancel(lim, r)
		return nil, now, ErrNoTimeLeft
	}
	return r, now.Add(d), nil
}

// reserve takes a token from lim at the current time, read while holding a
// lock of lim's own, so that no goroutine of this process gives lim a time
// older than one it has already been given. x/time/rate moves its clock
// back when it is given such a time (golang/go#65508), and then admits more
// than its rate: with 200 goroutines on 2 CPUs, times read before waiting
// for lim's mutex let through well over twice the limit.
func reserve(lim *rate.Limiter) (*rate.Reservation, time.Time) {
	mu := lockOf(lim)
	mu.Lock()
	now := time.Now()
	r := lim.ReserveN(now, 1)
	mu.Unlock()
	return r, now
}

// cancel gives a reservation's token back, if there is one, at the current
// time and under lim's lock, for the same reason as reserve.
func cancel(lim *rate.Limiter, r *rate.Reservation) {
	if r == nil {
		return
	}
	mu := lockOf(lim)
	mu.Lock()
	r.CancelAt(time.Now())
	mu.Unlock()
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
