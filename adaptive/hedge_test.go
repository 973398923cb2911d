package adaptive_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// exact returns the nearest-rank quantile q of ds: the least value with at
// least q of them at or below it.
func exact(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999999) - 1
	return s[max(i, 0)]
}

// The delay is the quantile of the recent successes rounded up to its
// bucket: never below the exact quantile, at most 1/32 above it, for
// latencies drawn from a few shapes and quantiles.
func TestHedgeDelayIsTheQuantile(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func() time.Duration{
		"uniform 10-50ms": func() time.Duration { return 10*time.Millisecond + time.Duration(r.Int64N(int64(40*time.Millisecond))) },
		"exponential, mean 30ms": func() time.Duration {
			return 10*time.Millisecond + time.Duration(r.ExpFloat64()*float64(20*time.Millisecond))
		},
		"98% ~15ms, 2% ~1s": func() time.Duration {
			if r.Float64() < 0.02 {
				return time.Second + time.Duration(r.Int64N(int64(100*time.Millisecond)))
			}
			return 12*time.Millisecond + time.Duration(r.Int64N(int64(6*time.Millisecond)))
		},
	}
	for name, draw := range shapes {
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
			h := &adaptive.Hedge{Quantile: q}
			var ds []time.Duration
			for range 5000 {
				d := draw()
				ds = append(ds, d)
				h.Learn(d, nil)
			}
			keep := max(1000, int(math.Ceil(20/(1-q)))) // the successes kept
			window := ds[len(ds)-keep:]
			want := exact(window, q)
			got := h.Delay(1, 0, 0)
			assert.GreaterOrEqual(t, got, want, "%s, q=%v: Delay = %v, exact %v", name, q, got, want)
			assert.LessOrEqual(t, float64(got), float64(want)*(1+1.0/32), "%s, q=%v: Delay = %v, exact %v", name, q, got, want)
		}
	}
}

// Until it has seen enough successes (200 at p95), the delay is the floor;
// it never goes below the floor nor above the cap; failures are not
// learned; and the window forgets: 1000 successes later, old ones no longer
// count.
func TestHedgeFloorCapAndWindow(t *testing.T) {
	t.Parallel()
	h := &adaptive.Hedge{Floor: 5 * time.Millisecond, Cap: 500 * time.Millisecond}
	assert.Equal(t, 5*time.Millisecond, h.Delay(1, 0, 0), "no sample yet")
	for range 199 {
		h.Learn(100*time.Millisecond, nil)
	}
	assert.Equal(t, 5*time.Millisecond, h.Delay(1, 0, 0), "199 samples are not enough")
	for range 10_000 {
		h.Learn(time.Hour, errors.New("failed")) // not learned
	}
	h.Learn(100*time.Millisecond, nil)
	got := h.Delay(1, 0, 0)
	assert.True(t, got >= 100*time.Millisecond && got <= 104*time.Millisecond, "200 samples of 100ms: Delay = %v", got)

	for range 1000 {
		h.Learn(time.Millisecond, nil)
	}
	assert.Equal(t, 5*time.Millisecond, h.Delay(1, 0, 0), "below the floor")
	for range 1000 {
		h.Learn(time.Minute, nil)
	}
	assert.Equal(t, 500*time.Millisecond, h.Delay(2, time.Second, 0.5), "above the cap, whatever n, prev and u")
	h.Learn(-time.Second, nil) // counts as 0: no panic
}

// Learn and Delay from many goroutines at once: the histogram stays
// consistent (the race detector watches), and the delay ends where the
// latencies put it.
func TestHedgeConcurrent(t *testing.T) {
	t.Parallel()
	h := &adaptive.Hedge{Floor: time.Millisecond}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20_000 {
				h.Learn(time.Duration(1+(i+g)%20)*time.Millisecond, nil)
				_ = h.Delay(1, 0, 0)
			}
		})
	}
	wg.Wait()
	for range 1000 {
		h.Learn(20*time.Millisecond, nil)
	}
	got := h.Delay(1, 0, 0)
	assert.True(t, got >= 20*time.Millisecond && got <= 21*time.Millisecond, "Delay = %v", got)
}

// tail is a dependency with a heavy tail: 98% of its attempts take about
// 5ms, 2% about 1s, drawn from the call's number and the attempt's, so that
// a run is the same however its goroutines are scheduled.
func tail(call int) func(context.Context) error {
	return func(ctx context.Context) error {
		n := retry.AttemptFrom(ctx)
		r := rand.New(rand.NewPCG(uint64(call), uint64(n)))
		d := 4*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Millisecond)))
		if r.Float64() < 0.02 {
			d = 900*time.Millisecond + time.Duration(r.Int64N(int64(200*time.Millisecond)))
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tailRun is the outcome of calls against tail.
type tailRun struct {
	p50, p99, p999 time.Duration
	extra          float64 // attempts beyond one per call, per call
	delay          time.Duration
}

// runTail makes calls to tail, 20 at a time, with policy, and measures the
// calls' latencies and the attempts they made.
func runTail(t *testing.T, calls int, policy retry.Policy) tailRun {
	var mu sync.Mutex
	var latencies []time.Duration
	attempts := 0
	policy.Observe = func(_ context.Context, e retry.Event) {
		if e.Done {
			mu.Lock()
			attempts += e.Attempt
			latencies = append(latencies, e.Elapsed)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 20 {
		wg.Go(func() {
			for i := range next {
				assert.NoError(t, retry.Do(context.Background(), tail(i), policy))
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.Sort(latencies)
	q := func(p float64) time.Duration { return latencies[int(float64(len(latencies))*p+0.999999)-1] }
	run := tailRun{p50: q(0.5), p99: q(0.99), p999: q(0.999), extra: float64(attempts-calls) / float64(calls)}
	if h, ok := policy.HedgeDelay.(*adaptive.Hedge); ok {
		run.delay = h.Delay(1, 0, 0)
	}
	return run
}

// Hedging at the p95 of the latencies seen cuts the p99.9 of the calls of a
// heavy-tailed dependency tenfold or more, for a small extra load: with a
// 1ms floor, the quantile itself sets the delay; with the default floor of
// 10ms, the floor does.
func TestHedgeCutsTheTail(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const calls = 20_000
		base := runTail(t, calls, retry.Policy{})
		p95 := runTail(t, calls, retry.Policy{HedgeDelay: &adaptive.Hedge{Floor: time.Millisecond}})
		floor := runTail(t, calls, retry.Policy{HedgeDelay: &adaptive.Hedge{}})
		for _, r := range []struct {
			name string
			run  tailRun
		}{{"no hedging", base}, {"Hedge{Floor: 1ms}", p95}, {"Hedge{}", floor}} {
			t.Logf("%-18s p50 %7v  p99 %7v  p99.9 %7v  extra load %4.1f%%  delay %v",
				r.name, r.run.p50, r.run.p99, r.run.p999, 100*r.run.extra, r.run.delay)
		}
		assert.Greater(t, base.p999, 900*time.Millisecond, "the tail without hedging")
		assert.Zero(t, base.extra)
		for _, r := range []tailRun{p95, floor} {
			assert.LessOrEqual(t, r.p999*10, base.p999, "p99.9 cut tenfold: %v against %v", r.p999, base.p999)
			assert.LessOrEqual(t, r.p50, base.p50+time.Millisecond, "the median unharmed")
		}
		assert.True(t, p95.delay > 5*time.Millisecond && p95.delay < 7*time.Millisecond, "p95 in the fast mode: %v", p95.delay)
		assert.Less(t, p95.extra, 0.10, "extra load at p95")
		assert.Equal(t, 10*time.Millisecond, floor.delay)
		assert.Less(t, floor.extra, 0.03, "extra load at the floor")
	})
}
