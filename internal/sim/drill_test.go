package sim_test

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

// drillResults runs every variant of the drill once, with seed 1, and shares
// the results between the tests (the runs are deterministic).
var drillResults = sync.OnceValue(func() map[string]sim.DrillResult {
	out := map[string]sim.DrillResult{}
	for _, c := range sim.DrillVariants(1) {
		out[c.Name] = sim.RunDrill(c)
	}
	return out
})

func drill(t *testing.T, name string) sim.DrillResult {
	t.Helper()
	r, ok := drillResults()[name]
	require.True(t, ok, "no variant %q", name)
	return r
}

var variantNames = []string{"as given", "no jitter", "no limiter", "no jitter, no limiter", "10% budget", "no limiter, 503 + Retry-After",
	"adaptive limiter", "River's default"}

func TestDrillVariants(t *testing.T) {
	t.Parallel()
	vs := sim.DrillVariants(1)
	require.Len(t, vs, len(variantNames))
	for i, v := range vs {
		assert.Equal(t, variantNames[i], v.Name)
		assert.NotEmpty(t, v.Change)
		assert.Equal(t, 10_000, v.Jobs)
		assert.Equal(t, 10*time.Second, v.Outage)
		assert.Equal(t, 300, v.Capacity)
		if v.Name == sim.DrillNames.River {
			assert.Equal(t, 25, v.Policy.MaxAttempts, "River's default MaxAttempts")
		} else {
			assert.Equal(t, 5, v.Policy.MaxAttempts)
		}
		assert.Equal(t, v.Name == sim.DrillNames.ServerDelay, v.DownRetryAfter, "only one variant changes the provider")
		assert.Equal(t, v.Name == sim.DrillNames.River, v.IgnoreRetryAfter, "only River's policy is deaf to Retry-After")
	}
	given := vs[0].Policy
	assert.Equal(t, retry.Exponential{Base: 500 * ms, Cap: 30 * time.Second}, given.Backoff)
	require.NotNil(t, given.Limiter)
	assert.Equal(t, 200.0, sim.LimitOf(given.Limiter))
	assert.Nil(t, given.Budget)
	jitter := func(p retry.Policy) retry.Jitter { return p.Backoff.(retry.Exponential).Jitter }
	assert.Equal(t, retry.NoJitter, jitter(vs[1].Policy))
	assert.NotNil(t, vs[1].Policy.Limiter)
	assert.Equal(t, retry.FullJitter, jitter(vs[2].Policy))
	assert.Nil(t, vs[2].Policy.Limiter)
	assert.Equal(t, retry.NoJitter, jitter(vs[3].Policy))
	assert.Nil(t, vs[3].Policy.Limiter)
	assert.NotNil(t, vs[4].Policy.Budget)
	assert.NotNil(t, vs[4].Policy.Limiter)
	assert.Equal(t, retry.FullJitter, jitter(vs[5].Policy))
	assert.Nil(t, vs[5].Policy.Limiter)
	assert.Nil(t, vs[5].Policy.Budget)
	assert.NotSame(t, vs[0].Policy.Limiter, vs[1].Policy.Limiter, "each variant needs its own limiter")
	rated, ok := vs[6].Policy.Limiter.(interface{ Rate() float64 })
	require.True(t, ok, "the adaptive variant paces with an adaptive.Limiter")
	assert.Zero(t, rated.Rate(), "given no rate")
	assert.Zero(t, sim.LimitOf(vs[6].Policy.Limiter))
	assert.Equal(t, retry.Exponential{Base: 500 * ms, Cap: 30 * time.Second}, vs[6].Policy.Backoff, "only the limiter changes")
	assert.Equal(t, 16*time.Second, vs[7].Policy.Backoff.Delay(2, 0, 0.5), "River's schedule")
	assert.Nil(t, vs[7].Policy.Limiter)
	assert.Nil(t, vs[7].Policy.Budget)
	assert.Equal(t, 2*time.Second, vs[7].Policy.AttemptTimeout)
}

// TestDrillLosesNoJob checks the accounting of every variant: each job ends
// delivered or dead-lettered, once; attempts add up; the provider sends each
// notification at most once.
func TestDrillLosesNoJob(t *testing.T) {
	t.Parallel()
	for _, name := range variantNames {
		t.Run(name, func(t *testing.T) {
			r := drill(t, name)
			s := r.Summary
			assert.Equal(t, 10_000, s.Jobs)
			assert.Equal(t, 10_000, s.Delivered+s.DeadLettered, "delivered %d + dead-lettered %d", s.Delivered, s.DeadLettered)
			assert.Equal(t, len(r.Attempts), s.Attempts)

			// Plain comparisons in the loops, one assertion after: an
			// assertion per attempt would cost seconds under -race.
			perJob := make([]int, s.Jobs)
			misnumbered := 0
			for _, a := range r.Attempts {
				perJob[a.Job]++
				if perJob[a.Job] != a.N {
					misnumbered++
				}
			}
			assert.Zero(t, misnumbered, "attempts numbered out of order")
			dead := map[int]bool{}
			for _, d := range r.DeadLetters {
				assert.False(t, dead[d.Job], "job %d dead-lettered twice", d.Job)
				dead[d.Job] = true
				assert.Equal(t, perJob[d.Job], d.Attempts)
				assert.Error(t, d.Last)
			}
			most := 5
			if name == sim.DrillNames.River {
				most = 25
			}
			for job, n := range perJob {
				if n < 1 || n > most {
					assert.Fail(t, "attempts out of range", "job %d made %d attempts, at most %d", job, n, most)
				}
			}
			assert.LessOrEqual(t, r.Sent, s.Jobs)
			assert.GreaterOrEqual(t, r.Sent, s.Delivered, "every delivered job was sent")
			assert.Equal(t, r.Sent, r.Count(sim.Sent)+countSentLost(r), "each key sent once")
			assert.Equal(t, s.Duplicates, r.Count(sim.Duplicate))
		})
	}
}

// countSentLost counts lost replies to a job's first served attempt: those
// sent a notification too.
func countSentLost(r sim.DrillResult) int {
	served := map[int]bool{}
	n := 0
	for _, a := range r.Attempts {
		switch a.Result {
		case sim.Sent, sim.Duplicate:
			served[a.Job] = true
		case sim.LostReply:
			if !served[a.Job] {
				n++
			}
			served[a.Job] = true
		}
	}
	return n
}

func TestDrillDeadLetterReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason error // the only reason, or nil for no dead letter
	}{
		{"as given", nil},
		{"no jitter", nil},
		{"no limiter", retry.ErrExhausted},
		{"10% budget", retry.ErrBudgetExhausted},
		{"no jitter, no limiter", retry.ErrExhausted},
		{"no limiter, 503 + Retry-After", retry.ErrExhausted},
		{"adaptive limiter", retry.ErrExhausted},
		{"River's default", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := drill(t, tt.name)
			if tt.reason == nil {
				assert.Empty(t, r.DeadLetters)
				return
			}
			require.NotEmpty(t, r.DeadLetters)
			reasons := r.DeadByReason()
			require.Len(t, reasons, 1)
			assert.ErrorIs(t, reasons[0].Reason, tt.reason)
			assert.Equal(t, len(r.DeadLetters), reasons[0].Count)
		})
	}
}

// A dead letter's LastAttempt is when its job's last attempt reached the
// provider, at or before the time it was given up on; so, counted by
// DeadTimes in clock seconds, no second has more dead letters than
// attempts.
func TestDrillDeadLettersAtTheirLastAttempt(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"no limiter", "10% budget", "no limiter, 503 + Retry-After"} {
		r := drill(t, name)
		last := map[int]time.Duration{}
		for _, a := range r.Attempts {
			last[a.Job] = a.At
		}
		require.NotEmpty(t, r.DeadLetters, name)
		for _, d := range r.DeadLetters {
			// Plain comparisons: thousands of testify calls on a map are slow.
			if at, ok := last[d.Job]; !ok || d.LastAttempt != at || d.LastAttempt > d.At {
				t.Errorf("%s: job %d: LastAttempt %v, At %v; its last attempt at %v (%v)", name, d.Job, d.LastAttempt, d.At, at, ok)
			}
		}
		until := r.Summary.Drain
		attempts, dead := sim.PerSecond(r.Times(), until), sim.PerSecond(r.DeadTimes(), until)
		require.Len(t, dead, len(attempts))
		for k := range dead {
			if dead[k] > attempts[k] {
				t.Errorf("%s: second %d: %d dead letters, %d attempts", name, k, dead[k], attempts[k])
			}
		}
	}
}

// TestDrillProviderModel checks the provider's side: nothing served while
// down (silent, or 503 in the variant that says so), no more than the
// capacity served in any one-second window after.
func TestDrillProviderModel(t *testing.T) {
	t.Parallel()
	for _, name := range variantNames {
		t.Run(name, func(t *testing.T) {
			r := drill(t, name)
			served := map[time.Duration]int{}
			for _, a := range r.Attempts {
				want := sim.Down
				if name == sim.DrillNames.ServerDelay {
					want = sim.Unavailable
				}
				if (a.Result == want) != (a.At < 10*time.Second) {
					assert.Fail(t, "down is the outage", "%v at %v", a.Result, a.At)
				}
				if a.Result != want && a.Result != sim.Throttled {
					served[a.At.Truncate(time.Second)]++
				}
			}
			for w, n := range served {
				assert.LessOrEqual(t, n, 300, "%d served in the window at %v", n, w)
			}
		})
	}
}

// spreadNoLimiter is the drill without its limiter, with the jobs queued
// over 20 s instead of at once: the jobs queued late in the outage meet the
// provider with attempts left, so 429s are retried.
var spreadNoLimiter = sync.OnceValue(func() sim.DrillResult {
	c := sim.DrillVariants(1)[2]
	c.Arrival = 20 * time.Second
	return sim.RunDrill(c)
})

// TestDrillHonoursWaits checks, for every job, the gap between an attempt and
// the next: at least the 2 s attempt timeout after a timeout (outage or lost
// reply), at least Retry-After (1 s) after a 429, and after a 503 from the
// provider down, no attempt before it is back.
func TestDrillHonoursWaits(t *testing.T) {
	t.Parallel()
	for _, name := range append(variantNames, "spread, no limiter") {
		t.Run(name, func(t *testing.T) {
			var r sim.DrillResult
			if name == "spread, no limiter" {
				r = spreadNoLimiter()
				assert.Equal(t, 10_000, r.Summary.Delivered+r.Summary.DeadLettered)
			} else {
				r = drill(t, name)
			}
			last := map[int]sim.Attempt{}
			throttled := 0
			for _, a := range r.Attempts {
				if p, ok := last[a.Job]; ok {
					gap := a.At - p.At
					switch p.Result {
					case sim.Down, sim.LostReply:
						if gap < 2*time.Second {
							assert.Fail(t, "retried before the attempt timeout", "job %d: %v after a timeout", a.Job, gap)
						}
					case sim.Throttled:
						throttled++
						if name == sim.DrillNames.River {
							// Deaf to Retry-After: its own wait, at least
							// 0.9 n^4 s after the n-th failure.
							if least := time.Duration(0.9 * math.Pow(float64(p.N), 4) * float64(time.Second)); gap < least {
								assert.Fail(t, "retried before River's wait", "job %d: %v after its 429 at attempt %d", a.Job, gap, p.N)
							}
						} else if gap < time.Second {
							assert.Fail(t, "retried before Retry-After", "job %d: %v after a 429", a.Job, gap)
						}
					case sim.Unavailable:
						if a.At < 10*time.Second {
							assert.Fail(t, "retried before Retry-After", "job %d: at %v after a 503 at %v", a.Job, a.At, p.At)
						}
					default:
						assert.Fail(t, "an attempt after a success", "job %d", a.Job)
					}
				}
				last[a.Job] = a
			}
			assert.Equal(t, throttled, r.RetriedAfter(sim.Throttled))
			switch name {
			case "spread, no limiter":
				assert.Greater(t, throttled, 1000, "429s retried after Retry-After")
			case "no limiter", "no jitter, no limiter":
				// Queued at once, every job spends its first four attempts
				// in the outage: only last attempts meet a 429.
				assert.Zero(t, throttled)
				assert.Positive(t, r.Count(sim.Throttled))
			}
		})
	}
}

// TestDrillAsGivenByHand pins the as-given run to numbers that can be worked
// out by hand: the limiter lets 20 attempts through at t = 0, then one every
// 5 ms, so 2,019 first attempts go out before the provider is back at 10 s;
// they time out and retry after the 10,000 first attempts, which take 50 s.
func TestDrillAsGivenByHand(t *testing.T) {
	t.Parallel()
	r := drill(t, "as given")
	s := r.Summary
	assert.Equal(t, 2019, r.Count(sim.Down))
	assert.Equal(t, 2019, r.InOutage())
	assert.LessOrEqual(t, s.PeakUp, 201, "200 a second once up, and at most one more in a clock second")
	assert.Zero(t, r.Count(sim.Throttled))
	assert.Equal(t, 10_000, s.Delivered)
	assert.Equal(t, 219, s.PeakPerSecond, "burst 20 + 199 in the first second")
	assert.Equal(t, 10_000+2019+r.Count(sim.LostReply), s.Attempts)
	assert.InDelta(t, 0.01, float64(r.Count(sim.LostReply))/float64(s.Attempts-2019), 0.003)
	assert.Greater(t, s.Drain, 60*time.Second)
	assert.Less(t, s.Drain, 66*time.Second)
	// The 5,000th delivery: 2,019 outage jobs go last, so it is the 5,000th
	// of the others, sent 5 ms apart after t = 10 s: about 35 s.
	assert.InDelta(t, 35.0, s.P50.Seconds(), 0.5)
}

// TestDrillWithoutJitterOrLimiterMovesInWaves pins the synchronised waves:
// every job times out together (2 s), waits the same ceiling (0.5, 1, 2, 4
// s) and comes back at the same instant, the last wave after the outage.
func TestDrillWithoutJitterOrLimiterMovesInWaves(t *testing.T) {
	t.Parallel()
	r := drill(t, "no jitter, no limiter")
	waves := map[time.Duration]int{}
	for _, a := range r.Attempts {
		waves[a.At]++
	}
	want := map[time.Duration]int{}
	for _, at := range []time.Duration{0, 2500 * ms, 5500 * ms, 9500 * ms} {
		want[at] = 10_000
	}
	// The last wave meets the provider up, but with 300 a second of
	// capacity: it serves 300 and throttles the rest, who have no attempt left.
	want[15500*ms] = 10_000
	assert.Equal(t, want, waves)
	assert.Equal(t, 300, r.Sent)
	assert.Equal(t, 10_000, r.Summary.PeakPerSecond)
	// With jitter the same policy spreads its attempts, and delivers more.
	jittered := drill(t, "no limiter")
	assert.Greater(t, jittered.Summary.Delivered, 3*r.Summary.Delivered)
}

// TestDrillServerDelaySetsWaits checks the variant where the provider says
// when it will be back: every job's first attempt meets the outage and gets
// a 503 with Retry-After (10 s at t = 0), longer than any first backoff
// (0 to 500 ms), so the server sets that wait for every job, and the 429s
// after the outage set more.
func TestDrillServerDelaySetsWaits(t *testing.T) {
	t.Parallel()
	r := drill(t, sim.DrillNames.ServerDelay)
	assert.Equal(t, 10_000, r.Count(sim.Unavailable), "no limiter: every first attempt at t = 0")
	assert.Equal(t, 10_000, r.RetriedAfter(sim.Unavailable))
	assert.Equal(t, 10_000, r.InOutage(), "one attempt per job in the outage, where silence costs four")
	assert.Greater(t, len(r.ServerWaits), 10_000)
	assert.LessOrEqual(t, len(r.ServerWaits), r.RetriedAfter(sim.Unavailable)+r.RetriedAfter(sim.Throttled))
	waits := map[time.Duration]int{}
	for _, at := range r.ServerWaits {
		waits[at.Truncate(time.Second)]++
	}
	assert.Equal(t, 10_000, waits[0], "decided at t = 0, on the 503s")
	// Told when to come back, the jobs spend fewer attempts in the outage
	// and deliver more than when the provider hangs.
	hangs := drill(t, sim.DrillNames.NoLimiter)
	assert.Greater(t, hangs.InOutage(), 4*r.InOutage())
	assert.Greater(t, r.Summary.Delivered, hangs.Summary.Delivered)
	// Where no Retry-After outlasts a backoff, the server sets no wait.
	for _, name := range []string{sim.DrillNames.AsGiven, sim.DrillNames.NoJitter, sim.DrillNames.NoLimiter, sim.DrillNames.NoJitterNoLimiter, sim.DrillNames.Budget10} {
		assert.Empty(t, drill(t, name).ServerWaits, name)
	}
	river := drill(t, sim.DrillNames.River)
	assert.Positive(t, river.Count(sim.Throttled))
	assert.Empty(t, river.ServerWaits, "River's policy does not read Retry-After")
}

// TestDrillServerWaitsAgainstTheBackoff pins the count on small runs where
// it is known exactly: with no backoff, every retry after a 503 or a 429 has
// its wait set by the server; with a backoff longer than any Retry-After,
// none has.
func TestDrillServerWaitsAgainstTheBackoff(t *testing.T) {
	t.Parallel()
	run := func(b retry.Backoff) sim.DrillResult {
		c := sim.DrillVariants(1)[5]
		c.Jobs = 1000
		c.Policy.Backoff = b
		return sim.RunDrill(c)
	}
	zero := run(retry.Constant(0))
	require.Positive(t, zero.RetriedAfter(sim.Throttled))
	assert.Len(t, zero.ServerWaits, zero.RetriedAfter(sim.Unavailable)+zero.RetriedAfter(sim.Throttled))
	long := run(retry.Constant(20 * time.Second))
	assert.Positive(t, long.RetriedAfter(sim.Unavailable))
	assert.Empty(t, long.ServerWaits)
}

func TestDrillLimiterPacesEveryVariantThatHasOne(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"as given", "no jitter", "10% budget"} {
		t.Run(name, func(t *testing.T) {
			assert.LessOrEqual(t, drill(t, name).Summary.PeakPerSecond, 220, "limit 200/s + burst 20")
		})
	}
	assert.Equal(t, 10_000, drill(t, "no limiter").Summary.PeakPerSecond)
}

func TestDrillBudgetShedsOutageRetries(t *testing.T) {
	t.Parallel()
	// A 10% budget earns 0.1 token per first attempt: about 200 tokens by
	// the time the 2,019 outage attempts have failed, so about 1,800 jobs
	// are dead-lettered that the limiter alone would have delivered.
	r := drill(t, "10% budget")
	assert.InDelta(t, 1800, r.Summary.DeadLettered, 100)
	assert.Less(t, r.Summary.Attempts, drill(t, "as given").Summary.Attempts)
}

func TestDrillIsReproducible(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) sim.DrillResult {
		c := sim.DrillVariants(seed)[2]
		c.Jobs = 1000
		return sim.RunDrill(c)
	}
	a, b, c := run(7), run(7), run(8)
	assert.Equal(t, a.Summary, b.Summary)
	assert.Equal(t, a.Attempts, b.Attempts)
	assert.NotEqual(t, a.Attempts, c.Attempts)
}

func TestDrillWithoutAttemptTimeoutAnswers503(t *testing.T) {
	t.Parallel()
	c := sim.DrillVariants(1)[0]
	c.Jobs = 100
	c.Policy.AttemptTimeout = 0
	r := sim.RunDrill(c)
	assert.Equal(t, 100, r.Summary.Delivered+r.Summary.DeadLettered)
	assert.Zero(t, r.Count(sim.LostReply), "no timeout, no lost reply")
	require.NotEmpty(t, r.DeadLetters)
	var re *retry.ResponseError
	require.True(t, errors.As(r.DeadLetters[0].Last, &re))
	assert.Equal(t, 503, re.StatusCode)
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	attempts := []time.Duration{3 * time.Second, 0, 500 * ms, 999 * ms, time.Second, 1500 * ms}
	lat := []time.Duration{4 * time.Second, 1 * time.Second, 3 * time.Second, 2 * time.Second}
	s := sim.Summarize(6, time.Second, attempts, lat, 2, 5*time.Second)
	assert.Equal(t, sim.Summary{
		Jobs: 6, Delivered: 4, DeadLettered: 2, Attempts: 6,
		PeakPerSecond: 3, // 0, 500ms, 999ms in second 0
		PeakUp:        2, // 1s, 1.5s in second 1, the first after the outage
		Drain:         5 * time.Second, P50: 2 * time.Second, P99: 4 * time.Second,
	}, s)
	assert.Equal(t, 0.0, s.RetriesPerDelivered())
	assert.True(t, math.IsNaN(sim.Summary{Jobs: 3, Attempts: 9}.RetriesPerDelivered()))
	assert.Equal(t, 2.0, sim.Summary{Jobs: 3, Attempts: 9, Delivered: 3}.RetriesPerDelivered())
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	sorted := make([]time.Duration, 100)
	for i := range sorted {
		sorted[i] = time.Duration(i+1) * ms
	}
	tests := []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7 * ms}, 0.99, 7 * ms},
		{"p50 of 100", sorted, 0.50, 50 * ms},
		{"p99 of 100", sorted, 0.99, 99 * ms},
		{"p100", sorted, 1, 100 * ms},
		{"p0 is the first", sorted, 0, 1 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sim.Percentile(tt.in, tt.q)
			assert.Equal(t, tt.want, got, "Percentile(%v) = %v, want %v", tt.q, got, tt.want)
		})
	}
}

func TestPeakPerSecond(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []time.Duration
		want int
	}{
		{"none", nil, 0},
		{"one", []time.Duration{5 * time.Second}, 1},
		{"a second is half-open", []time.Duration{0, time.Second, 2 * time.Second}, 1},
		{"clock seconds, not a sliding window", []time.Duration{900 * ms, 1100 * ms, 1800 * ms, 2500 * ms}, 2},
		{"same instant", []time.Duration{ms, ms, ms}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sim.PeakPerSecond(tt.in)
			assert.Equal(t, tt.want, got, "PeakPerSecond = %d, want %d", got, tt.want)
		})
	}
}

func TestPerSecond(t *testing.T) {
	t.Parallel()
	times := []time.Duration{3500 * ms, 0, 999 * ms, time.Second, -ms}
	assert.Equal(t, []int{3, 1, 0, 1}, sim.PerSecond(times, 0), "a negative time counts in second 0")
	assert.Nil(t, sim.PerSecond(nil, 0))
	assert.Equal(t, []int{3, 1, 0, 1, 0, 0}, sim.PerSecond(times, 5500*ms), "padded to cover [0, 5.5s)")
	assert.Equal(t, []int{3, 1, 0, 1}, sim.PerSecond(times, 2*time.Second), "never cut short")
	assert.Equal(t, []int{0, 0}, sim.PerSecond(nil, 2*time.Second))
	assert.Equal(t, time.Second, sim.RateBin)
}

func TestSummarizePeakOnceBack(t *testing.T) {
	t.Parallel()
	times := []time.Duration{0, 0, 0, 1500 * ms, 2 * time.Second, 2100 * ms}
	tests := []struct {
		outage time.Duration
		want   int
	}{
		{0, 3},
		{time.Second, 2},
		{1500 * ms, 2}, // from second 2, the first that starts at or after 1.5s
		{3 * time.Second, 0},
	}
	for _, tt := range tests {
		got := sim.Summarize(6, tt.outage, times, nil, 0, 0).PeakUp
		assert.Equal(t, tt.want, got, "outage until %v: PeakUp = %d, want %d", tt.outage, got, tt.want)
	}
}

// TestPeakIsTheLargestPerSecondCount pins the one definition the table and
// the charts share: the peak of every drill variant is the largest count
// PerSecond gives, and PerSecond's counts add up to the attempts.
func TestPeakIsTheLargestPerSecondCount(t *testing.T) {
	t.Parallel()
	for _, name := range variantNames {
		r := drill(t, name)
		counts := sim.PerSecond(r.Times(), 0)
		assert.Equal(t, slices.Max(counts), r.Summary.PeakPerSecond, name)
		total := 0
		for _, n := range counts {
			total += n
		}
		assert.Equal(t, r.Summary.Attempts, total, name)
	}
}

func BenchmarkDrill(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sim.RunDrill(sim.DrillVariants(1)[2])
	}
}

// RiverBackoff is River's schedule: n^4 seconds after the n-th failure,
// with 10% jitter either way, and a wait that never overflows.
func TestRiverBackoff(t *testing.T) {
	t.Parallel()
	b := sim.DrillVariants(1)[7].Policy.Backoff
	for n, want := range map[int]time.Duration{1: time.Second, 2: 16 * time.Second, 3: 81 * time.Second, 4: 256 * time.Second, 5: 625 * time.Second} {
		assert.Equal(t, want, b.Delay(n, 0, 0.5), "n = %d, no jitter", n)
		assert.Equal(t, want*9/10, b.Delay(n, 0, 0), "n = %d, 10%% less", n)
		assert.InDelta(t, float64(want)*1.1, float64(b.Delay(n, 0, 0.999999999)), float64(want)*1e-8, "n = %d, 10%% more", n)
	}
	assert.Equal(t, time.Second, b.Delay(0, 0, 0.5), "n below 1 counts as 1")
	assert.Equal(t, time.Duration(math.MaxInt64), b.Delay(1_000_000, 0, 0.5), "saturates")
	assert.Positive(t, b.Delay(309, 0, 0.99))
}

// The adaptive limiter in the drill, given no rate: the provider's 429s
// teach it one once the provider is back, and from the second after the
// first 429 it keeps the provider between 0.6 and 1.3 of its capacity
// (0.85 of it, its cut), with fewer than 10% of attempts throttled in any
// 10 s window; it meets far fewer 429s than no limiter and River's
// default. It cannot pace the silent outage, which sends no 429: every
// job's first four attempts meet it, as without a limiter, and the jobs
// it dead-letters are those whose fifth attempt met it too, or met a 429
// or a lost reply after it.
func TestDrillAdaptiveLimiter(t *testing.T) {
	t.Parallel()
	r := drill(t, sim.DrillNames.Adaptive)
	noLimiter, river := drill(t, sim.DrillNames.NoLimiter), drill(t, sim.DrillNames.River)
	throttled := r.Times(sim.Throttled)
	require.NotEmpty(t, throttled)
	first := slices.Min(throttled)
	assert.GreaterOrEqual(t, first, 10*time.Second, "no 429 before the provider is back")
	assert.Less(t, slices.Max(throttled), 11*time.Second, "every 429 in the first second it is back: none once it has learned")

	attempts, served := sim.PerSecond(r.Times(), 0), sim.PerSecond(r.Times(sim.Sent, sim.Duplicate, sim.LostReply), 0)
	perSecond429 := sim.PerSecond(throttled, time.Duration(len(attempts))*time.Second)
	from, until := int(first/time.Second)+1, int(r.Summary.Drain/time.Second)-1 // whole seconds with a backlog
	require.Greater(t, until-from, 20)
	for k := from; k < until; k++ {
		assert.LessOrEqual(t, float64(attempts[k]), 1.3*sim.DrillCapacity, "second %d", k)
		assert.GreaterOrEqual(t, float64(served[k]), 0.6*sim.DrillCapacity, "second %d", k)
	}
	for k := from; k+10 <= until; k += 10 {
		sent, thr := 0, 0
		for j := k; j < k+10; j++ {
			sent, thr = sent+attempts[j], thr+perSecond429[j]
		}
		assert.Less(t, float64(thr), 0.1*float64(sent), "window from %d s", k)
	}
	assert.Less(t, 10*r.Count(sim.Throttled), noLimiter.Count(sim.Throttled), "far fewer 429s than no limiter")
	assert.Less(t, 10*r.Count(sim.Throttled), river.Count(sim.Throttled), "far fewer 429s than River's default")

	// The outage: nothing paced, the first four attempts of every job spent.
	assert.Equal(t, noLimiter.InOutage(), r.InOutage())
	inOutage := map[int]int{}
	for _, a := range r.Attempts {
		if a.At < r.Outage {
			inOutage[a.Job]++
		}
	}
	for job := range r.Summary.Jobs {
		if inOutage[job] < 4 {
			require.Fail(t, "a job kept an attempt", "job %d: %d attempts in the outage", job, inOutage[job])
		}
	}
	for _, d := range r.DeadLetters {
		assert.Equal(t, 5, d.Attempts)
		assert.ErrorIs(t, d.Reason, retry.ErrExhausted)
	}
	assert.Equal(t, r.Summary.Jobs, r.Summary.Delivered+r.Summary.DeadLettered)
	require.NotEmpty(t, r.LimiterRate)
	assert.InDelta(t, 0.85*sim.DrillCapacity, r.LimiterRate[until-1], 0.1*sim.DrillCapacity, "paces at its cut of the capacity")
}

// River's default policy in the drill: no limiter, deaf to Retry-After, 25
// attempts: every job is delivered in the end, but the provider meets
// crowds far above its capacity and most of their attempts are 429s, and
// the waits of attempt^4 seconds stretch the drain far beyond as given's.
func TestDrillRiverDefault(t *testing.T) {
	t.Parallel()
	r, given := drill(t, sim.DrillNames.River), drill(t, sim.DrillNames.AsGiven)
	assert.Equal(t, r.Summary.Jobs, r.Summary.Delivered)
	assert.Greater(t, r.Summary.PeakUp, 5*sim.DrillCapacity)
	assert.Greater(t, r.Count(sim.Throttled), r.Summary.Jobs)
	assert.Greater(t, r.Summary.Drain, 10*given.Summary.Drain)
	assert.Equal(t, 20_000, r.InOutage(), "two attempts each: at 0 s, and 1 s after the first timeout")
}
