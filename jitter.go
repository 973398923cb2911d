package retry

import (
	"math"
	"time"
)

// Jitter says how [Exponential] draws a wait from its ceiling c with the
// uniform draw u. Randomising each wait spreads out clients that failed at the
// same moment, so they do not come back in synchronised waves.
//
// The zero value is [FullJitter]. Any value other than the three constants
// also acts as FullJitter.
type Jitter uint8

const (
	// FullJitter waits u*c: anywhere in [0, c). It spreads load best and
	// finishes contended work fastest, so it is the default.
	FullJitter Jitter = iota
	// EqualJitter waits c/2 + u*c/2: in [c/2, c), so every retry keeps at
	// least half of the exponential wait.
	EqualJitter
	// NoJitter waits exactly c. Clients that failed together retry together;
	// use it only when a single client talks to the dependency.
	NoJitter
)

// String returns the jitter's name, such as "full".
func (j Jitter) String() string {
	switch j {
	case EqualJitter:
		return "equal"
	case NoJitter:
		return "none"
	}
	return "full"
}

// belowOne is the largest float64 below 1.
var belowOne = math.Nextafter(1, 0)

// unit clamps u to [0, 1); NaN counts as 0.
func unit(u float64) float64 {
	if !(u > 0) {
		return 0
	}
	return min(u, belowOne)
}

// scale returns u*d for u in [0, 1) and d >= 0, never more than d.
// float64(d) may round up past d, so the product is clamped before it is
// converted: a d near MaxInt64 must not wrap.
func scale(d time.Duration, u float64) time.Duration {
	x := unit(u) * float64(d)
	if x >= float64(d) {
		return d
	}
	return time.Duration(x)
}

func (j Jitter) apply(c time.Duration, u float64) time.Duration {
	switch j {
	case NoJitter:
		return c
	case EqualJitter:
		half := c - c/2
		return c/2 + scale(half, u)
	}
	return scale(c, u)
}

// Decorrelated is AWS's "decorrelated jitter": each wait is drawn from the one
// before it, min(Cap, Base + u*(3*prev - Base)), where prev is the previous
// scheduled wait and counts as Base before the first retry (and whenever it
// is below Base). Waits grow about threefold while they stay well spread.
//
// Its only state is the prev argument, which the retry loop carries for each
// call, so one Decorrelated value serves every goroutine. The zero value is
// usable: a zero or negative Base means 100ms and a zero or negative Cap
// means 10s, as for [Exponential]. A Cap below Base makes every wait Cap. u is
// clamped to [0, 1); n is ignored. No wait exceeds Cap or is negative.
type Decorrelated struct {
	Base time.Duration
	Cap  time.Duration
}

// Delay returns the wait before the next retry, drawn from prev. See [Backoff].
func (d Decorrelated) Delay(_ int, prev time.Duration, u float64) time.Duration {
	base, limit := d.Base, d.Cap
	if base <= 0 {
		base = defaultBase
	}
	if limit <= 0 {
		limit = defaultCap
	}
	if base >= limit {
		return limit
	}
	prev = max(prev, base)
	// In float64 so that 3*prev cannot overflow.
	x := float64(base) + unit(u)*(3*float64(prev)-float64(base))
	if !(x < float64(limit)) {
		return limit
	}
	// float64(base) rounds a Base above 2^53ns; no wait is below Base.
	return max(time.Duration(x), base)
}
