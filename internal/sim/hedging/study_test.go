package hedging_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim/hedging"
)

const ms = time.Millisecond

// The study's tail: every attempt works 4-6 ms, and 2% stall 0.9-1.1 s
// first; the draws depend on the seed, the call and the attempt only.
func TestTailDraws(t *testing.T) {
	t.Parallel()
	const n = 200_000
	slow := 0
	for i := range n {
		stall, work := hedging.StudyTail.Draw(1, i, 1)
		if work < 4*ms || work >= 6*ms {
			t.Fatalf("call %d: work %v outside [4ms, 6ms)", i, work)
		}
		if stall != 0 {
			slow++
			if stall < 900*ms || stall >= 1100*ms {
				t.Fatalf("call %d: stall %v outside [0.9s, 1.1s)", i, stall)
			}
		}
		assert.Equal(t, stall+work, hedging.StudyTail.At(1, i, 1))
	}
	// 5 sigma of a binomial(n, 0.02).
	sigma := math.Sqrt(n * 0.02 * 0.98)
	assert.InDelta(t, 0.02*n, slow, 5*sigma)
	s1, w1 := hedging.StudyTail.Draw(7, 3, 2)
	s2, w2 := hedging.StudyTail.Draw(7, 3, 2)
	assert.Equal(t, [2]time.Duration{s1, w1}, [2]time.Duration{s2, w2}, "the same draw for the same attempt")
	_, w3 := hedging.StudyTail.Draw(7, 3, 3)
	_, w4 := hedging.StudyTail.Draw(8, 3, 2)
	assert.NotEqual(t, w1, w3, "another attempt, another draw")
	assert.NotEqual(t, w1, w4, "another seed, another draw")
	assert.Equal(t, 5*ms, hedging.StudyTail.MeanWork())
	assert.Equal(t, 10_000.0, hedging.StudyServer().Capacity())
	assert.True(t, math.IsInf(hedging.Server{}.Capacity(), 1))
}

// The server: a worker each, first come first served, a bounded queue and
// a 503 beyond it; a cancellation that reaches it drops a waiting attempt
// and stops a running one, and the work counts until then.
func TestHedgeServerQueues(t *testing.T) {
	t.Parallel()
	work := hedging.Tail{WorkMin: 10 * ms, WorkMax: 10 * ms}
	run := func(cancelDelay time.Duration, p retry.Policy, arrivals ...time.Duration) hedging.Result {
		return hedging.Run(hedging.Config{
			Arrivals: arrivals, Policy: p, Trace: true,
			Server: hedging.Server{Workers: 1, Queue: 1, Latency: work, CancelDelay: cancelDelay},
		})
	}
	once := retry.Policy{MaxAttempts: 1}
	r := run(0, once, 0, ms, 2*ms)
	assert.Equal(t, 3, r.Attempts)
	assert.Equal(t, 2, r.Served)
	assert.Equal(t, 1, r.Queued)
	assert.Equal(t, 1, r.Shed, "the third finds the worker busy and the queue full")
	assert.Equal(t, []time.Duration{10 * ms, 19 * ms}, r.Latencies, "the second waits 9 ms for the worker")
	require.Len(t, r.Failed, 1)
	assert.ErrorIs(t, r.Failed[0].Reason, retry.ErrExhausted)
	assert.Equal(t, 20*ms, r.Work)

	// A hedge at 4 ms queues behind its own first attempt, which wins at
	// 10 ms; the worker it frees goes at once to the next in the queue, the
	// hedge, which runs until the cancellation arrives at 11 ms.
	hedged := retry.Policy{HedgeDelay: retry.Constant(4 * ms)}
	r = run(ms, hedged, 0)
	assert.Equal(t, 2, r.Attempts)
	assert.Equal(t, 1, r.Hedges)
	assert.Equal(t, 1, r.Cut)
	assert.Equal(t, 11*ms, r.Work, "10 ms, and the loser's 1 ms until its cancellation arrived")
	assert.Equal(t, []time.Duration{10 * ms}, r.Latencies)
	// With another call's attempt ahead of it in the queue, the loser is
	// still waiting when its cancellation arrives: dropped, no work.
	r = hedging.Run(hedging.Config{
		Arrivals: []time.Duration{0, ms}, Policy: hedged,
		Server: hedging.Server{Workers: 1, Queue: 3, Latency: work, CancelDelay: ms},
	})
	assert.Equal(t, 4, r.Attempts)
	assert.Equal(t, 1, r.Dropped, "call 0's hedge, queued behind call 1")
	assert.Equal(t, 21*ms, r.Work, "two attempts of 10 ms, and call 1's hedge for 1 ms")
	assert.Equal(t, []time.Duration{10 * ms, 19 * ms}, r.Latencies)

	// Two calls with a 5 ms deadline: the first runs from 0, the second
	// waits for it from 1 ms. The first's deadline at 5 ms reaches the
	// server at 6 ms, which stops it and serves the second, whose own
	// deadline (6 ms) reaches the server at 7 ms: 6 + 1 ms of work. With
	// no cancellation both are served in full.
	deadline := func(cancelDelay time.Duration) hedging.Result {
		return hedging.Run(hedging.Config{
			Arrivals: []time.Duration{0, ms}, Policy: once, Timeout: 5 * ms,
			Server: hedging.Server{Workers: 1, Queue: 1, Latency: work, CancelDelay: cancelDelay},
		})
	}
	cut, never := deadline(ms), deadline(-1)
	assert.Empty(t, cut.Latencies, "both calls outlast their deadline")
	assert.Equal(t, 7*ms, cut.Work)
	assert.Zero(t, cut.Dropped)
	assert.Equal(t, 20*ms, never.Work, "no cancellation: both are served to their end")
	assert.Zero(t, never.Dropped)
}

// hedgeStudy runs the study's variants under both loads, once, seed 1.
var hedgeStudy = sync.OnceValue(func() map[string][2]hedging.Result {
	out := map[string][2]hedging.Result{}
	normal := hedging.RunAll(hedging.Variants(hedging.Normal, 1), 2)
	overload := hedging.RunAll(hedging.Variants(hedging.Overload, 1), 2)
	for i := range normal {
		out[normal[i].Name] = [2]hedging.Result{normal[i], overload[i]}
	}
	return out
})

// TestHedgeStudyTargets checks issue 22's targets on the seeded study:
// hedging cuts the p99.9 at least 10 times at no more than 5% extra load,
// and under overload hedging with the budget sends no more attempts than
// no hedging; and the study's other claims.
func TestHedgeStudyTargets(t *testing.T) {
	t.Parallel()
	runs := hedgeStudy()
	require.Len(t, runs, 7)
	normal := func(name string) hedging.Result { return runs[name][0] }
	overload := func(name string) hedging.Result { return runs[name][1] }
	none := normal(hedging.Names.None)
	assert.Equal(t, hedging.Calls, none.Succeeded(), "at half the capacity every call succeeds")
	assert.Greater(t, none.Quantile(0.999), 900*ms, "without hedging the p99.9 is a stall")
	assert.LessOrEqual(t, none.Quantile(0.95), hedging.P95)
	assert.Greater(t, none.Quantile(0.95), hedging.P95-ms)
	for _, name := range []string{hedging.Names.Fixed, hedging.Names.FixedBudget, hedging.Names.Adaptive, hedging.Names.AdaptiveBudget} {
		r := normal(name)
		assert.LessOrEqual(t, 10*r.Quantile(0.999), none.Quantile(0.999), "%s: the p99.9 cut 10 times", name)
		assert.LessOrEqual(t, r.ExtraLoad(), 0.05, "%s: at most 5%% more attempts", name)
		assert.Positive(t, r.Hedges, name)
		assert.Equal(t, hedging.Calls, r.Succeeded(), name)
	}
	assert.Equal(t, 10*ms, normal(hedging.Names.Adaptive).HedgeDelay.Round(ms), "the adaptive hedge sits at its floor")

	oNone := overload(hedging.Names.None)
	assert.Greater(t, oNone.ExtraLoad(), 0.5, "overloaded, the plain policy retries its 503s")
	for _, name := range []string{hedging.Names.FixedBudget, hedging.Names.AdaptiveBudget} {
		r := overload(name)
		assert.LessOrEqual(t, r.Attempts, oNone.Attempts, "%s: no more attempts than no hedging", name)
		assert.LessOrEqual(t, r.ExtraLoad(), 0.1+0.002, "%s: the budget's 10%%, and its bucket's start", name)
	}
	assert.Greater(t, overload(hedging.Names.Fixed).Attempts, oNone.Attempts, "without a budget hedging adds to the overload")
	rot := overload(hedging.Names.RetryOnTimeout)
	assert.Greater(t, rot.ExtraLoad(), 2.5, "retry on timeout resends nearly every call 3 times")
	assert.Less(t, rot.Succeeded(), rot.Calls/100, "and almost none succeeds")
	assert.Greater(t, overload(hedging.Names.Adaptive).HedgeDelay, 5*hedging.P95, "the adaptive delay rises with the queue")
}

// The model keeps the core's limits on every call: attempts within
// MaxAttempts, hedges in flight within MaxInFlight.
func TestHedgeModelLimits(t *testing.T) {
	t.Parallel()
	for _, p := range []retry.Policy{
		{HedgeDelay: retry.Constant(ms)},
		{HedgeDelay: retry.Constant(0), MaxInFlight: 3, MaxAttempts: 6},
		{HedgeDelay: retry.Constant(2 * ms), MaxInFlight: 5, MaxAttempts: -1},
	} {
		r := hedging.Run(hedging.Config{
			Calls: 3000, Rate: 12_000, Timeout: 100 * ms, Policy: p, Trace: true,
			Server: hedging.Server{Workers: 20, Queue: 40, Latency: hedging.StudyTail, CancelDelay: ms}, Seed: 3,
		})
		maxAttempts := p.MaxAttempts
		if maxAttempts == 0 {
			maxAttempts = 4
		}
		inFlight := max(p.MaxInFlight, 2)
		if p.MaxInFlight == 0 {
			inFlight = 2
		}
		byCall := map[int][]hedging.AttemptTrace{}
		for _, a := range r.Trace {
			byCall[a.Call] = append(byCall[a.Call], a)
		}
		for call, as := range byCall {
			if maxAttempts > 0 && len(as) > maxAttempts {
				t.Fatalf("call %d: %d attempts, MaxAttempts %d", call, len(as), maxAttempts)
			}
			for _, a := range as {
				n := 0
				for _, b := range as {
					if b.Start <= a.Start && b.End > a.Start {
						n++
					}
				}
				if n > inFlight {
					t.Fatalf("call %d: %d in flight at %v, MaxInFlight %d", call, n, a.Start, inFlight)
				}
			}
		}
		assert.Equal(t, r.Calls, r.Succeeded()+failedCalls(r))
	}
}

func failedCalls(r hedging.Result) int {
	n := 0
	for _, f := range r.Failed {
		n += f.Count
	}
	return n
}

func TestHedgeStudyIsReproducible(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) hedging.Result {
		c := hedging.Variants(hedging.Overload, seed)[2]
		c.Calls = 5000
		return hedging.Run(c)
	}
	a, b, c := run(5), run(5), run(6)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a.Latencies, c.Latencies)
}
