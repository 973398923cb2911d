package retry

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Budget caps how much retrying a group of calls may do, so that when a
// dependency is failing for everyone, retries stop adding to its load.
//
// Each call through [Do] deposits once, when its first attempt starts; each
// retry first asks to withdraw, and a false answer stops the call at once
// with [ErrBudgetExhausted] (no wait, no OnRetry). A refused withdrawal takes
// nothing. The first attempt is never refused. Methods take the current time,
// as rate.Limiter's AllowN does, so a simulation can drive a Budget in virtual
// time. Implementations must be safe for concurrent use: one Budget is shared
// by every call to the same dependency.
type Budget interface {
	Deposit(now time.Time)
	Withdraw(now time.Time) bool
}

// Budget arithmetic is exact, in millionths of a token.
const microsPerToken = 1_000_000

// TokenBucket is the [Budget] made by [NewBudget]: each call earns ratio
// tokens, each retry spends one, and a floor of minPerSecond retries per
// second lets quiet callers retry even with an empty bucket.
//
// The bucket is lock-free: Deposit and Withdraw are atomic compare-and-swap
// loops, and the floor's rate.Limiter (which locks) is asked only when the
// bucket is empty. A TokenBucket is safe for concurrent use by any number of
// goroutines. The zero value holds nothing, earns nothing and has no floor,
// so it refuses every retry; make one with NewBudget. A nil *TokenBucket
// behaves as the zero value: a Policy whose Budget is a nil *TokenBucket (a
// forgotten NewBudget) refuses every retry rather than panicking. A nil
// Budget interface, by contrast, means no budget.
type TokenBucket struct {
	micros   atomic.Int64 // tokens held, in millionths
	earn     int64        // millionths earned per call
	capacity int64        // most millionths held
	floor    *rate.Limiter
}

// NewBudget returns a retry budget that allows retries for about ratio of
// the calls (0.1: at most one retry per ten calls, on average), plus
// minPerSecond retries per second whatever the traffic.
//
// The bucket starts empty and holds at most max(100, 10*minPerSecond) tokens,
// so a burst of retries after a quiet spell is bounded too. ratio is rounded
// to 6 decimals (arithmetic is exact: ten calls at 0.1 earn exactly one
// retry). The floor is a rate.Limiter of minPerSecond per second with a
// burst of max(1, ceil(minPerSecond)); minPerSecond 0 means no floor.
//
// Bad input is normalised, not rejected: a negative or NaN ratio or
// minPerSecond counts as 0, a ratio above 1000 counts as 1000, and a
// minPerSecond above 1e6 counts as 1e6.
func NewBudget(ratio, minPerSecond float64) *TokenBucket {
	ratio = clamp(ratio, 1000)
	minPerSecond = clamp(minPerSecond, 1e6)
	b := &TokenBucket{
		earn:     int64(math.Round(ratio * microsPerToken)),
		capacity: int64(math.Round(max(100, 10*minPerSecond) * microsPerToken)),
	}
	if minPerSecond > 0 {
		b.floor = rate.NewLimiter(rate.Limit(minPerSecond), int(max(1, math.Ceil(minPerSecond))))
	}
	return b
}

// clamp returns x limited to [0, hi]; NaN counts as 0.
func clamp(x, hi float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, hi)
}

// Deposit adds one call's share of tokens, up to the capacity.
func (b *TokenBucket) Deposit(time.Time) {
	if b == nil {
		return
	}
	for {
		old := b.micros.Load()
		next := min(old+b.earn, b.capacity)
		if next == old || b.micros.CompareAndSwap(old, next) {
			return
		}
	}
}

// Withdraw takes one token for a retry and reports whether it may go ahead.
// With fewer than one token held it asks the floor instead; when that
// refuses too, Withdraw returns false and takes nothing.
func (b *TokenBucket) Withdraw(now time.Time) bool {
	if b == nil {
		return false
	}
	for {
		old := b.micros.Load()
		if old < microsPerToken {
			return b.floor != nil && b.floor.AllowN(now, 1)
		}
		if b.micros.CompareAndSwap(old, old-microsPerToken) {
			return true
		}
	}
}

// Balance returns the tokens held in the bucket, for metrics. The floor's
// tokens are not counted: with an empty bucket, Balance is 0 even when the
// floor would still grant a retry.
func (b *TokenBucket) Balance() float64 {
	if b == nil {
		return 0
	}
	return float64(b.micros.Load()) / microsPerToken
}
