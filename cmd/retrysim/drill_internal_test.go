package main

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/svg"
)

// drillRun is the drill's variants run once at a size and seed, shared by
// the tests (the runs are deterministic).
type drillRun struct {
	configs []sim.DrillConfig
	results []sim.DrillResult
}

func runDrill(jobs int, seed uint64) drillRun {
	var d drillRun
	d.configs = sim.DrillVariants(seed)
	for i := range d.configs {
		d.configs[i].Jobs = jobs
		d.results = append(d.results, sim.RunDrill(d.configs[i]))
	}
	return d
}

var (
	defaultDrill = sync.OnceValue(func() drillRun { return runDrill(sim.DrillJobs, 1) })
	smallDrill   = sync.OnceValue(func() drillRun { return runDrill(500, 7) })
)

func (d drillRun) result(t *testing.T, name string) *sim.DrillResult {
	t.Helper()
	for i := range d.results {
		if d.results[i].Name == name {
			return &d.results[i]
		}
	}
	require.FailNow(t, "no variant "+name)
	return nil
}

// series returns the chart's series of that name, and whether it has one.
func series(ch svg.Chart, name string) (svg.Series, bool) {
	for _, s := range ch.Series {
		if s.Name == name {
			return s, true
		}
	}
	return svg.Series{}, false
}

// TestDrillChartsCountAsTheTable checks that each chart draws the rates the
// tables report, with the one definition of sim.PerSecond: the attempts
// line peaks at the table's peak attempts/s, and each series' steps add up
// to the table's totals, one value per clock second.
func TestDrillChartsCountAsTheTable(t *testing.T) {
	t.Parallel()
	for _, d := range []drillRun{defaultDrill(), smallDrill()} {
		for i, r := range d.results {
			v := d.configs[i]
			ch := drillChart(r, v.Capacity, sim.LimitOf(v.Policy.Limiter), "provider down", "lesson")
			assert.False(t, ch.LogY, "a linear axis, where an empty second is a true 0")
			want := map[string]int{
				"attempts":                 r.Summary.Attempts,
				"delivered":                r.Summary.Delivered,
				"429 Too Many Requests":    r.Count(sim.Throttled),
				deadSeries:                 r.Summary.DeadLettered,
				"waits set by Retry-After": len(r.ServerWaits),
			}
			for name, total := range want {
				s, ok := series(ch, name)
				if total == 0 && name != "attempts" {
					assert.False(t, ok, "%s, %s: an empty series is left out", r.Name, name)
					continue
				}
				require.True(t, ok, "%s: no %s series", r.Name, name)
				require.Equal(t, len(s.X), len(s.Y))
				sum, peak := 0.0, 0.0
				for j := 0; j < len(s.Y); j += 2 {
					// Each second is a step: two points, one second apart, at its count.
					assert.Equal(t, s.Y[j], s.Y[j+1])
					assert.InDelta(t, 1, s.X[j+1]-s.X[j], 1e-9)
					assert.InDelta(t, float64(j/2), s.X[j], 1e-9)
					assert.GreaterOrEqual(t, s.Y[j], 0.0)
					sum += s.Y[j]
					peak = max(peak, s.Y[j])
				}
				assert.Equal(t, float64(total), sum, "%s, %s: the steps add up to the table's total", r.Name, name)
				if attempts, ok := series(ch, "attempts"); ok && name == deadSeries {
					for j := range s.Y {
						assert.LessOrEqual(t, s.Y[j], attempts.Y[j], "%s: no second has more dead letters than attempts", r.Name)
					}
				}
				if name == "attempts" {
					assert.Equal(t, float64(r.Summary.PeakPerSecond), peak, "%s: the chart's peak is the table's", r.Name)
				}
			}
			assert.Equal(t, 0.0, ch.XMin)
			assert.GreaterOrEqual(t, ch.XMax, r.Summary.Drain.Seconds())
			assert.Less(t, ch.XMax, r.Summary.Drain.Seconds()+5.001, "the time axis fits the run")
			rules := 1
			if sim.LimitOf(v.Policy.Limiter) > 0 {
				rules = 2
			}
			assert.Len(t, ch.Rules, rules, "the capacity, and the fixed limiter's rate where there is one")
			learned, ok := series(ch, learnedSeries)
			assert.Equal(t, r.LimiterRate != nil, ok, "%s: an adaptive limiter's rate is drawn", r.Name)
			if ok {
				for j, y := range learned.Y {
					if j%2 == 0 && !math.IsNaN(y) {
						assert.Equal(t, r.LimiterRate[j/2], y, "%s: second %d", r.Name, j/2)
					}
				}
			}
			require.Len(t, ch.Bands, 1)
			assert.Equal(t, v.Outage.Seconds(), ch.Bands[0].X1, "the outage is marked")
		}
	}
}

// Each drill chart says at its foot what "as given" is and what its variant
// changes, so that it stands without the README.
func TestDrillNoteDefinesAsGiven(t *testing.T) {
	t.Parallel()
	variants := sim.DrillVariants(1)
	given := variants[0]
	require.Equal(t, sim.DrillNames.AsGiven, given.Name)
	// The words describe the policy that runs.
	p := given.Policy
	assert.Equal(t, 5, p.MaxAttempts)
	assert.Equal(t, retry.Exponential{Base: 500 * time.Millisecond, Cap: 30 * time.Second}, p.Backoff)
	assert.Equal(t, 2*time.Second, p.AttemptTimeout)
	require.NotNil(t, p.Limiter)
	lim, ok := p.Limiter.(*sim.VirtualLimiter)
	require.True(t, ok)
	assert.Equal(t, rate.Limit(200), lim.Limit())
	assert.Equal(t, 20, lim.Burst())
	assert.Equal(t, "MaxAttempts 5, Exponential{Base: 500ms, Cap: 30s} (full jitter), AttemptTimeout 2s, rate.NewLimiter(200, 20) for every attempt", policyAsGiven)
	for _, v := range variants {
		note := drillNote(v)
		assert.Contains(t, note, `"As given" is the policy under test: `+policyAsGiven+".", v.Name)
		switch v.Name {
		case sim.DrillNames.AsGiven:
			assert.Contains(t, note, "This chart is the policy as given.")
		case sim.DrillNames.River:
			assert.Contains(t, note, "This variant replaces the policy with "+v.Change+".", v.Name)
		default:
			assert.Contains(t, note, "This variant changes one thing: "+v.Change+".", v.Name)
		}
		assert.Contains(t, note, "serves 300 requests a second")
	}
}

// TestDrillLessonsTellTheRunsNumbers checks that each variant's sentence is
// built from its run's numbers, at the default size and at another size
// and seed.
func TestDrillLessonsTellTheRunsNumbers(t *testing.T) {
	t.Parallel()
	for _, d := range []drillRun{defaultDrill(), smallDrill()} {
		lessons := drillLessons(d.results)
		require.Len(t, lessons, len(d.results), "one sentence per variant")
		for _, r := range d.results {
			l := lessons[r.Name]
			assert.True(t, strings.HasSuffix(l, "."), "%s: %q", r.Name, l)
			assert.Equal(t, 1, strings.Count(l, ". ")+1, "%s: one sentence: %q", r.Name, l)
		}
		given, noJitter, noLimiter := d.result(t, sim.DrillNames.AsGiven), d.result(t, sim.DrillNames.NoJitter), d.result(t, sim.DrillNames.NoLimiter)
		neither, budget, told := d.result(t, sim.DrillNames.NoJitterNoLimiter), d.result(t, sim.DrillNames.Budget10), d.result(t, sim.DrillNames.ServerDelay)
		assert.Contains(t, lessons[sim.DrillNames.AsGiven], "at "+count(given.Summary.PeakPerSecond)+" attempts a second ("+count(noLimiter.Summary.PeakPerSecond)+" without it)")
		assert.Contains(t, lessons[sim.DrillNames.AsGiven], count(given.Summary.Delivered)+" jobs are delivered ("+count(noLimiter.Summary.Delivered)+" without it)")
		assert.Contains(t, lessons[sim.DrillNames.NoJitter], count(noJitter.Summary.Delivered)+" jobs delivered ("+count(neither.Summary.Delivered)+" with neither")
		assert.Contains(t, lessons[sim.DrillNames.NoLimiter], "at most "+count(noLimiter.Summary.PeakUp)+" attempts a second ("+count(neither.Summary.PeakUp)+" without jitter)")
		assert.Contains(t, lessons[sim.DrillNames.NoJitterNoLimiter], count(neither.Summary.Delivered)+" jobs are delivered")
		refused, _ := budgetRefusals(*budget)
		assert.Contains(t, lessons[sim.DrillNames.Budget10], "refused "+plural(refused, "retry"))
		assert.Contains(t, lessons[sim.DrillNames.Budget10], count(budget.Summary.DeadLettered)+" jobs dead-lettered")
		assert.Contains(t, lessons[sim.DrillNames.ServerDelay], "sets "+plural(len(told.ServerWaits), "wait"))
		assert.Contains(t, lessons[sim.DrillNames.ServerDelay], count(told.InOutage())+" attempts meet the outage ("+count(noLimiter.InOutage())+" when it hangs)")
		learned, river := d.result(t, sim.DrillNames.Adaptive), d.result(t, sim.DrillNames.River)
		assert.Contains(t, lessons[sim.DrillNames.Adaptive], "meets "+plural(learned.Count(sim.Throttled), "429")+" in all ("+
			count(noLimiter.Count(sim.Throttled))+" with no limiter, "+count(river.Count(sim.Throttled))+" under River's default)")
		assert.Contains(t, lessons[sim.DrillNames.Adaptive], "drains in "+secs(learned.Summary.Drain)+" ("+secs(given.Summary.Drain)+" as given)")
		if peak, ok := peakAfterFirst(learned, sim.Throttled); ok {
			assert.Contains(t, lessons[sim.DrillNames.Adaptive], "at most "+plural(peak, "attempt")+" a second")
		} else {
			assert.Contains(t, lessons[sim.DrillNames.Adaptive], "it meets no 429, so it never paces")
		}
		assert.Contains(t, lessons[sim.DrillNames.River], "sends "+plural(river.Summary.Attempts, "attempt")+" ("+count(given.Summary.Attempts)+" as given), "+
			count(river.Count(sim.Throttled))+" answered 429")
		assert.Contains(t, lessons[sim.DrillNames.River], "stretch the drain to "+secs(river.Summary.Drain))
	}
	// At the default size the runs are known: pin the claims that depend on
	// which way the numbers went.
	l := drillLessons(defaultDrill().results)
	assert.Contains(t, l[sim.DrillNames.NoJitter], "Without jitter the limiter works just as well")
	assert.Contains(t, l[sim.DrillNames.NoLimiter], "jitter spreads each wave of retries over its backoff window")
	assert.Contains(t, l[sim.DrillNames.NoJitterNoLimiter], "5 waves of 10,000 attempts, each at a single instant, 4 of them in the outage")
	assert.Contains(t, l[sim.DrillNames.Budget10], "while the provider was down: that saved")
	assert.Contains(t, l[sim.DrillNames.Budget10], "that as given delivered")
	assert.Contains(t, l[sim.DrillNames.Adaptive], "the silent outage sends none, so 41,031 attempts meet it as with no limiter (2,019 as given)")
	assert.Contains(t, l[sim.DrillNames.Adaptive], "1,327 jobs are dead-lettered (0 as given)")
	assert.Contains(t, l[sim.DrillNames.Adaptive], "sooner for the jobs it gave up")
	assert.Contains(t, l[sim.DrillNames.River], "delivers every job")
}

func TestDrillLessonsNeedTheirComparison(t *testing.T) {
	t.Parallel()
	d := defaultDrill()
	only := drillLessons([]sim.DrillResult{*d.result(t, sim.DrillNames.NoJitterNoLimiter)})
	assert.Len(t, only, 1, "lockstep needs no other run")
	assert.Empty(t, drillLessons(nil))
}

func TestWaves(t *testing.T) {
	t.Parallel()
	s := time.Second
	times := []time.Duration{0, 0, 0, s, 2 * s, 2 * s, 3 * s, 3 * s, 3 * s, 3 * s}
	assert.Equal(t, []wave{{0, 3}, {3 * s, 4}}, waves(times, 3))
	assert.Equal(t, []wave{{0, 3}, {2 * s, 2}, {3 * s, 4}}, waves(times, 2))
	assert.Empty(t, waves(times, 5))
}

func TestCountAndPlural(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {26740, "26,740"}, {1234567, "1,234,567"}, {-1500, "-1,500"}}
	for _, tt := range tests {
		got := count(tt.n)
		assert.Equal(t, tt.want, got, "count(%d) = %q, want %q", tt.n, got, tt.want)
	}
	assert.Equal(t, "1 retry", plural(1, "retry"))
	assert.Equal(t, "1,778 retries", plural(1778, "retry"))
	assert.Equal(t, "5 waves", plural(5, "wave"))
	assert.Equal(t, "0 waits", plural(0, "wait"))
}

func TestWriteWrapped(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	writeWrapped(&out, "  name: ", "one two three four five six", 20)
	assert.Equal(t, "  name: one two\n        three four\n        five six\n", out.String())
	out.Reset()
	writeWrapped(&out, "x: ", "unbreakablewordlongerthanwidth", 10)
	assert.Equal(t, "x: unbreakablewordlongerthanwidth\n", out.String(), "a long word stays whole")
}

func TestShortestGapAfter(t *testing.T) {
	t.Parallel()
	s := time.Second
	r := sim.DrillResult{Attempts: []sim.Attempt{
		{At: 0, Job: 1, Result: sim.Throttled},
		{At: 0, Job: 2, Result: sim.Throttled},
		{At: 1500 * time.Millisecond, Job: 1, Result: sim.Throttled},
		{At: 2 * s, Job: 3, Result: sim.Down},
		{At: 2600 * time.Millisecond, Job: 1, Result: sim.Sent},
		{At: 3 * s, Job: 2, Result: sim.Sent},
		{At: 3100 * time.Millisecond, Job: 3, Result: sim.Sent},
	}}
	gap, ok := shortestGapAfter(r, sim.Throttled)
	assert.True(t, ok)
	assert.Equal(t, 1100*time.Millisecond, gap, "job 1's second 429, answered at 1.5s, retried at 2.6s")
	gap, ok = shortestGapAfter(r, sim.Down)
	assert.True(t, ok)
	assert.Equal(t, 1100*time.Millisecond, gap)
	_, ok = shortestGapAfter(r, sim.LostReply)
	assert.False(t, ok)
}

// TestDrillLessonsReadWellForOneJob checks the sentences at the smallest
// drill: singular nouns, and no claim the numbers do not support.
func TestDrillLessonsReadWellForOneJob(t *testing.T) {
	t.Parallel()
	d := runDrill(1, 1)
	lessons := drillLessons(d.results)
	require.Len(t, lessons, len(d.results))
	for name, l := range lessons {
		for _, bad := range []string{" 1 jobs", " 1 attempts", " 1 waits", " 1 retries", "1 job are"} {
			assert.NotContains(t, l, bad, name)
		}
	}
	assert.Contains(t, lessons[sim.DrillNames.AsGiven], "With the limiter, the provider gets at most 1 attempt a second",
		"one job cannot make the limiter bind")
	assert.NotContains(t, lessons[sim.DrillNames.NoLimiter], "spreads", "one job has no wave to spread")
}
