package retry_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// A limiter that can never grant another token must give a clear error at
// once, not block: x/time/rate reserves at an infinite delay when its rate is
// 0 or negative and its burst is spent.
func TestDoLimiterThatCanNeverGrant(t *testing.T) {
	t.Parallel()
	for _, limit := range []rate.Limit{0, -1} {
		synctest.Test(t, func(t *testing.T) {
			lim := rate.NewLimiter(limit, 1)
			calls := 0
			fn := func(context.Context) error { calls++; return errFlaky }
			start := time.Now()

			err := retry.Do(t.Context(), fn, retry.Policy{MaxAttempts: 3, Limiter: lim})
			require.Error(t, err)
			assert.ErrorIs(t, err, errFlaky, "limit %v: the first attempt's error is kept", limit)
			assert.ErrorContains(t, err, "no attempt can ever start", "limit %v", limit)
			assert.Equal(t, 1, calls, "limit %v: the burst's one token paid for the first attempt", limit)

			err = retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
			require.Error(t, err)
			assert.ErrorContains(t, err, "no attempt can ever start", "limit %v", limit)
			assert.Equal(t, 1, calls, "limit %v: no attempt without a token", limit)
			assert.Zero(t, time.Since(start), "limit %v: it waited", limit)
		})
	}
}

// A token reserved for a retry that will not happen goes back to the
// limiter, so a call that gives up costs the limiter nothing more.
func TestDoLimiterTokenReturnedOnStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 2)
		err := retry.Do(t.Context(), func(context.Context) error { return errFlaky },
			retry.Policy{MaxAttempts: 2, Limiter: lim, Budget: retry.NewBudget(0, 0)})
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		assert.InDelta(t, 1, lim.Tokens(), 1e-9, "the first attempt's token spent, the refused retry's given back")
	})
}

func TestDoNilTokenBucket(t *testing.T) {
	t.Parallel()
	var b *retry.TokenBucket // a forgotten NewBudget
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error { calls++; return errFlaky },
		retry.Policy{Budget: b, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrBudgetExhausted, "a nil bucket refuses like a zero one")
	assert.ErrorIs(t, err, errFlaky)
	assert.Equal(t, 1, calls)
	assert.Zero(t, b.Balance())
}

// uRecorder is a custom Backoff that records the draws it is given.
type uRecorder struct {
	mu sync.Mutex
	us []float64
}

func (r *uRecorder) Delay(_ int, _ time.Duration, u float64) time.Duration {
	r.mu.Lock()
	r.us = append(r.us, u)
	r.mu.Unlock()
	return 0
}

func TestDoClampsRand(t *testing.T) {
	t.Parallel()
	for _, u := range []float64{-1, math.Inf(-1), 1, 2, math.Inf(1), math.NaN(), 0.5} {
		rec := &uRecorder{}
		_ = retry.Do(t.Context(), func(context.Context) error { return errFlaky },
			retry.Policy{MaxAttempts: 2, Backoff: rec, Rand: func() float64 { return u }})
		require.Len(t, rec.us, 1)
		got := rec.us[0]
		assert.True(t, got >= 0 && got < 1, "Rand() = %v reached the Backoff as %v, want a value in [0, 1)", u, got)
		if u == 0.5 {
			assert.Equal(t, 0.5, got, "a valid draw passes unchanged")
		}
	}
	rec := &uRecorder{}
	_, _ = retry.Next(retry.Policy{Backoff: rec}, 1, 0, errFlaky, time.Now(), time.Time{}, 7)
	require.Len(t, rec.us, 1)
	assert.Less(t, rec.us[0], 1.0, "Next clamps u too")
}

// BenchmarkLimiterAdmittedRate runs 200 goroutines through Do with a shared
// limiter of 100,000 attempts per second, half of the calls failing once, and
// reports the attempts admitted per second of the run against the limit
// (admitted/limit, which must stay near 1 and never well above it). Measured
// on 2 CPUs with -benchtime 3s: 0.997 with retries and 0.97 to 0.99 with every
// retry's token given back, where times read before waiting for the
// limiter's lock let through 1.33 to 1.49 and 2.58 to 2.64 times the limit.
func BenchmarkLimiterAdmittedRate(b *testing.B) {
	for _, refuse := range []bool{false, true} {
		name := "retries"
		if refuse {
			name = "budget-refuses"
		}
		b.Run(name, func(b *testing.B) {
			const limit = 100_000
			lim := rate.NewLimiter(limit, 100)
			p := retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), Limiter: lim}
			if refuse {
				// Every retry is refused after its token was reserved, so
				// each one is given back.
				p.Budget = retry.NewBudget(0, 0)
			}
			var attempts atomic.Int64
			var n atomic.Int64
			b.SetParallelism(100) // 200 goroutines on 2 CPUs
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					_ = retry.Do(context.Background(), func(context.Context) error {
						attempts.Add(1)
						if i%2 == 0 {
							return errFlaky
						}
						return nil
					}, p)
				}
			})
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(attempts.Load())/elapsed/limit, "admitted/limit")
		})
	}
}
