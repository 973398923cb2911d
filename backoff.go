package retry

import (
	"math"
	"time"
)

// Backoff gives the wait before a retry.
//
// Delay returns the wait before retry n (n is 1 for the first retry), given
// prev, the wait actually scheduled before the previous attempt (0 before the
// first retry), and u, one uniform draw in [0, 1) that supplies all the
// randomness. A Backoff holds no state: the same value serves any number of
// goroutines without locks, and a schedule can be checked with chosen u values.
// Implementations must return a wait that is never negative.
type Backoff interface {
	Delay(n int, prev time.Duration, u float64) time.Duration
}

// Defaults shared by Exponential and Decorrelated.
const (
	defaultBase = 100 * time.Millisecond
	defaultCap  = 10 * time.Second
)

// Exponential is capped exponential backoff with jitter: before retry n the
// ceiling is c = min(Cap, Base * Multiplier^(n-1)), and Jitter draws the wait
// from it. The cap applies before jitter, so no wait ever exceeds Cap.
//
// The zero value is the default backoff of a [Policy]: a zero or negative Base
// means 100ms, a zero or negative Cap means 10s, a Multiplier below 1 (zero
// included) or NaN means 2, and the zero Jitter is [FullJitter]. So the first
// four ceilings of Exponential{} are 100ms, 200ms, 400ms and 800ms. A Cap below
// Base makes every ceiling Cap. An n below 1 counts as 1 and u is clamped to
// [0, 1). The arithmetic saturates: no n, u or configuration overflows or gives
// a negative wait.
//
// Exponential is a plain value, safe for concurrent use.
type Exponential struct {
	Base       time.Duration
	Cap        time.Duration
	Multiplier float64
	Jitter     Jitter
}

// Delay returns the wait before retry n; prev is ignored. See [Backoff].
func (e Exponential) Delay(n int, _ time.Duration, u float64) time.Duration {
	return e.Jitter.apply(e.ceiling(n), u)
}

// ceiling returns min(Cap, Base * Multiplier^(n-1)) without overflow.
func (e Exponential) ceiling(n int) time.Duration {
	base, limit := e.Base, e.Cap
	if base <= 0 {
		base = defaultBase
	}
	if limit <= 0 {
		limit = defaultCap
	}
	if base >= limit {
		return limit
	}
	shift := max(n, 1) - 1
	m := e.Multiplier
	if m == 2 || !(m >= 1) {
		// The default path: a shift, no math.Pow. base < limit here, so
		// base<<shift <= limit is checked without overflowing.
		if shift >= 63 || base > limit>>shift {
			return limit
		}
		return base << shift
	}
	c := float64(base) * math.Pow(m, float64(shift))
	if !(c < float64(limit)) { // also catches +Inf
		return limit
	}
	// float64(base) rounds a Base above 2^53ns; Base*m^k is never below Base.
	return max(time.Duration(c), base)
}

// Constant is a backoff that always waits the same time, without jitter: for
// polling, and for tests that want an exact schedule. A negative Constant
// waits 0. Constant(0) retries at once.
type Constant time.Duration

// Delay returns the constant wait; n, prev and u are ignored.
func (c Constant) Delay(int, time.Duration, float64) time.Duration {
	return max(time.Duration(c), 0)
}
