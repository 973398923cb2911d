package sim_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

func strategy(t *testing.T, name string) sim.Strategy {
	t.Helper()
	for _, s := range sim.Strategies() {
		if s.Name == name {
			return s
		}
	}
	require.FailNow(t, "no strategy "+name)
	return sim.Strategy{}
}

// TestStrategiesMatchTheOriginalFormulas checks each library Backoff against
// the original program's formula, in its own terms: failure count n (1 for
// the first retry), base 5ms, cap 2s.
func TestStrategiesMatchTheOriginalFormulas(t *testing.T) {
	t.Parallel()
	const base, limit = float64(5 * ms), float64(2 * time.Second)
	expo := func(n int) float64 { return math.Min(limit, math.Pow(2, float64(n))*base) }
	original := map[string]func(n int, prev, u float64) float64{
		"exponential":  func(n int, _, _ float64) float64 { return expo(n) },
		"full jitter":  func(n int, _, u float64) float64 { return u * expo(n) },
		"equal jitter": func(n int, _, u float64) float64 { return expo(n)/2 + u*expo(n)/2 },
		"decorrelated": func(_ int, prev, u float64) float64 {
			if prev == 0 {
				prev = base // the original's sleep starts at base
			}
			return math.Min(limit, base+u*(3*prev-base))
		},
		"no backoff": func(int, float64, float64) float64 { return 0 },
	}
	us := []float64{0, 0.1, 0.5, 0.9, 0.999}
	require.Len(t, sim.Strategies(), len(original))
	for _, s := range sim.Strategies() {
		want, ok := original[s.Name]
		require.True(t, ok, "unexpected strategy %q", s.Name)
		t.Run(s.Name, func(t *testing.T) {
			for _, u := range us {
				var prev time.Duration
				for n := 1; n <= 12; n++ {
					got := s.Backoff.Delay(n, prev, u)
					w := want(n, float64(prev), u)
					assert.InDelta(t, w, float64(got), 1, "Delay(%d, %v, %v) = %v, want %v", n, prev, u, got, time.Duration(w))
					prev = got
				}
			}
		})
	}
	// The point of the mapping: the original's first retry waits up to 2*base.
	assert.Equal(t, 10*ms, strategy(t, "exponential").Backoff.Delay(1, 0, 0.5))
}

// TestEpisodeOfOneClient pins the message model: one client, no conflict,
// four messages of |N(10ms, 2ms)| each, drawn in order.
func TestEpisodeOfOneClient(t *testing.T) {
	t.Parallel()
	got := sim.Episode(1, strategy(t, "full jitter").Backoff, rand.New(rand.NewPCG(7, 8)))
	rng := rand.New(rand.NewPCG(7, 8))
	var want time.Duration
	for range 4 {
		want += time.Duration(math.Abs(float64(10*ms) + float64(2*ms)*rng.NormFloat64()))
	}
	assert.Equal(t, 1, got.Calls)
	assert.Equal(t, want, got.Time)
}

// spy is a Backoff that returns a new wait on each call and checks that the
// episode carries prev per client: a client's first retry gets 0, and each
// later one gets the wait returned for that client's previous retry.
type spy struct {
	t        *testing.T
	returned map[time.Duration]int // wait -> the n it was returned for
	calls    int
}

func (s *spy) Delay(n int, prev time.Duration, _ float64) time.Duration {
	s.calls++
	if n == 1 {
		assert.Zero(s.t, prev, "first retry: prev = %v, want 0", prev)
	} else {
		assert.Equal(s.t, n-1, s.returned[prev], "retry %d: prev %v was not returned for retry %d", n, prev, n-1)
	}
	wait := time.Duration(s.calls) * time.Microsecond
	s.returned[wait] = n
	return wait
}

func TestEpisodeCarriesPrevAndCountsPerClient(t *testing.T) {
	t.Parallel()
	s := &spy{t: t, returned: map[time.Duration]int{}}
	got := sim.Episode(30, s, rand.New(rand.NewPCG(1, 1)))
	require.Greater(t, s.calls, 30, "the spy must have seen contention")
	// Every write is a success (30 of them) or a failure followed by a retry.
	assert.Equal(t, 30+s.calls, got.Calls)
}

func TestEpisodeWaitsTheBackoffAfterAFailure(t *testing.T) {
	t.Parallel()
	// Two clients read version 0 at about 10ms and write at about 30ms: one
	// of the writes fails. With an hour's backoff, the loser finishes an hour
	// later, plus four message delays, after a third write.
	got := sim.Episode(2, retry.Constant(time.Hour), rand.New(rand.NewPCG(3, 3)))
	assert.Equal(t, 3, got.Calls)
	assert.Greater(t, got.Time, time.Hour+40*ms)
	assert.Less(t, got.Time, time.Hour+time.Second)
}

func TestRunPointIsReproducible(t *testing.T) {
	t.Parallel()
	s := strategy(t, "decorrelated")
	a := sim.RunPoint(s, 20, 10, 42)
	b := sim.RunPoint(s, 20, 10, 42)
	c := sim.RunPoint(s, 20, 10, 43)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a.Calls, c.Calls)
	// The sweep gives the same point, whatever the number of workers.
	sw := sim.Sweep([]sim.Strategy{s}, []int{10, 20}, 10, 42, 3, nil)
	require.Len(t, sw, 2)
	assert.Equal(t, a, sw[1])
	assert.Equal(t, 10, sw[0].Clients)
}

func TestSweepReportsProgress(t *testing.T) {
	t.Parallel()
	var last, total int
	calls := 0
	sim.Sweep(sim.Strategies()[:2], []int{2, 3, 4}, 1, 1, 1, func(done, n int) {
		calls++
		assert.Equal(t, last+1, done)
		last, total = done, n
	})
	assert.Equal(t, 6, calls)
	assert.Equal(t, 6, total)
}

// TestStudyMatchesPublishedFigures pins points of the study against the
// figures of the original program (means over 600 episodes): calls within
// 3% and time within 5%. The seed is fixed, so the check is deterministic;
// the episode counts keep it within a few seconds under -race, and are large
// enough that the standard error is well inside the tolerance.
func TestStudyMatchesPublishedFigures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		strategy string
		clients  int
		episodes int
	}{
		{"exponential N=10", "exponential", 10, 600},
		{"full jitter N=10", "full jitter", 10, 600},
		{"equal jitter N=10", "equal jitter", 10, 600},
		{"decorrelated N=10", "decorrelated", 10, 600},
		{"no backoff N=10", "no backoff", 10, 600},
		{"full jitter N=100", "full jitter", 100, 40},
		{"equal jitter N=100", "equal jitter", 100, 40},
		{"decorrelated N=100", "decorrelated", 100, 40},
		{"no backoff N=100", "no backoff", 100, 20},
		{"exponential N=100", "exponential", 100, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ref, ok := sim.LookupReference(tt.strategy, tt.clients)
			require.True(t, ok)
			p := sim.RunPoint(strategy(t, tt.strategy), tt.clients, tt.episodes, 1)
			assert.InEpsilon(t, ref.Calls, p.Calls, 0.03, "calls = %.1f, want %.1f ± 3%%", p.Calls, ref.Calls)
			if ref.Time > 0 {
				assert.InEpsilon(t, ref.Time.Seconds(), p.Time.Seconds(), 0.05, "time = %v, want %v ± 5%%", p.Time, ref.Time)
			}
		})
	}
}

func TestLookupReference(t *testing.T) {
	t.Parallel()
	r, ok := sim.LookupReference("full jitter", 100)
	require.True(t, ok)
	assert.Equal(t, 796.0, r.Calls)
	assert.Equal(t, 4890*ms, r.Time)
	_, ok = sim.LookupReference("full jitter", 50)
	assert.False(t, ok)
}

func BenchmarkEpisode(b *testing.B) {
	for _, s := range sim.Strategies() {
		b.Run(s.Name, func(b *testing.B) {
			b.ReportAllocs()
			rng := rand.New(rand.NewPCG(1, 1))
			for b.Loop() {
				sim.Episode(100, s.Backoff, rng)
			}
		})
	}
}
