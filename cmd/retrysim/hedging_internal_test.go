package main

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/internal/sim/hedging"
)

// The hedging study at its defaults, and smaller with another seed, run
// once and shared (the runs are deterministic).
var (
	defaultHedging = sync.OnceValue(func() hedgeRuns {
		return runHedging(config{calls: hedging.Calls, seed: 1, workers: 2})
	})
	smallHedging = sync.OnceValue(func() hedgeRuns {
		return runHedging(config{calls: 3000, seed: 7, workers: 2})
	})
)

func hedgeResult(t *testing.T, rs []hedging.Result, name string) hedging.Result {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	require.FailNow(t, "no variant "+name)
	return hedging.Result{}
}

// Each paragraph of what the study shows is built from the runs' numbers.
func TestHedgingLessonsTellTheRunsNumbers(t *testing.T) {
	t.Parallel()
	for _, runs := range []hedgeRuns{defaultHedging(), smallHedging()} {
		l := hedgingLessons(runs)
		for _, text := range []string{l.tail, l.cost, l.overload, l.overloadLatency, l.conclusion} {
			assert.True(t, strings.HasSuffix(text, "."), text)
			assert.NotContains(t, text, "%!", "a formatting mistake")
		}
		none, fixed := hedgeResult(t, runs.normal, hedging.Names.None), hedgeResult(t, runs.normal, hedging.Names.Fixed)
		assert.Contains(t, l.tail, "p99.9 "+ms(none.Quantile(0.999))+". Hedging at the p95 (6 ms) cuts the p99.9 to "+ms(fixed.Quantile(0.999)))
		assert.Contains(t, l.tail, fmt.Sprintf("%.0f times lower, for %s more attempts", float64(none.Quantile(0.999))/float64(fixed.Quantile(0.999)), pct(fixed.ExtraLoad())))
		oNone, oFixed, oFixedB := hedgeResult(t, runs.overload, hedging.Names.None), hedgeResult(t, runs.overload, hedging.Names.Fixed), hedgeResult(t, runs.overload, hedging.Names.FixedBudget)
		assert.Contains(t, l.overload, fmt.Sprintf("hedging at the p95 sends %.2f attempts a call (%.2f without hedging", oFixed.AttemptsPerCall(), oNone.AttemptsPerCall()))
		assert.Contains(t, l.overload, fmt.Sprintf("With the budget, hedging sends %.2f a call", oFixedB.AttemptsPerCall()))
		assert.Contains(t, l.cost, ms(runs.noCancel.Work/time.Duration(runs.noCancel.Calls)))
	}
	// At the defaults the runs are known: pin the claims that depend on
	// which way the numbers went.
	l := hedgingLessons(defaultHedging())
	assert.Contains(t, l.tail, "Retrying on a 6 ms timeout does as well at this load")
	assert.Contains(t, l.overload, "no more than without hedging")
	assert.Contains(t, l.overload, "about as many as the budget alone")
	assert.Contains(t, l.cost, "with hedging as without")
}

// The latency chart draws each variant's percentiles, merging those that
// coincide and leaving out a variant of which almost no call succeeded;
// the load chart's steps add up to each variant's attempts.
func TestHedgingCharts(t *testing.T) {
	t.Parallel()
	runs := defaultHedging()
	ch := latencyChart(runs.normal, "title", "lesson")
	assert.True(t, ch.LogY)
	names := []string{}
	for _, s := range ch.Series {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{
		"no hedging (and with budget)", "hedge at p95 (and with budget)", "adaptive hedge (and with budget)", "retry on timeout",
	}, names, "at half the capacity the budget changes nothing")
	for _, s := range ch.Series {
		r := hedgeResult(t, runs.normal, strings.TrimSuffix(s.Name, " (and with budget)"))
		for i, x := range s.X {
			if x > 2.999 && x < 3.001 {
				assert.Equal(t, float64(r.Quantile(0.999))/1e6, s.Y[i], "%s: p99.9", s.Name)
			}
		}
	}
	over := latencyChart(runs.overload, "title", "lesson")
	assert.Contains(t, over.Note, "Not drawn: retry on timeout (0.1% of its calls succeeded)")
	load := loadChart(runs.overload, "lesson")
	require.Len(t, load.Series, len(runs.overload))
	for i, s := range load.Series {
		sum := 0.0
		for j := 0; j < len(s.Y); j += 2 {
			sum += s.Y[j]
		}
		assert.Equal(t, float64(runs.overload[i].Attempts), sum, s.Name)
	}
	assert.Len(t, load.Rules, 2, "the capacity and the calls' rate")
}

func TestDurAndMs(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		6 * time.Millisecond: "6 ms", 900 * time.Millisecond: "0.9 s", 1100 * time.Millisecond: "1.1 s",
		2 * time.Second: "2 s", 1500 * time.Microsecond: "1.5 ms",
	} {
		assert.Equal(t, want, dur(d))
	}
	for d, want := range map[time.Duration]string{
		5012 * time.Microsecond: "5.01 ms", 11940 * time.Microsecond: "11.9 ms", 1095 * time.Millisecond: "1.09 s",
	} {
		assert.Equal(t, want, ms(d))
	}
}

// The live check's sentence follows its numbers: the connection claim only
// when the hedged HTTP/1.1 run opened far more connections than it cut
// losers, and the failures only when there were some.
func TestLiveHedgeLesson(t *testing.T) {
	t.Parallel()
	lat := []time.Duration{5 * time.Millisecond, time.Second}
	run := func(name string, arrived, cut, conns int64, failed int) liveHedgeResult {
		r := liveHedgeResult{name: name, latencies: lat, calls: 100, arrived: arrived, cut: cut, conns: conns, failed: failed}
		if failed > 0 {
			r.firstErr = errors.New("context canceled")
		}
		return r
	}
	healthy := liveHedgeLesson([]liveHedgeResult{
		run("HTTP/2, no hedging", 100, 0, 1, 0), run("HTTP/2, hedge", 102, 2, 1, 0),
		run("HTTP/1.1, no hedging", 100, 0, 10, 0), run("HTTP/1.1, hedge", 102, 2, 12, 0),
	})
	assert.Contains(t, healthy, "2.0% more requests, its 2 losers reset on 1 connection (1 without hedging)")
	assert.Contains(t, healthy, "there each loser cancelled in flight costs its connection.")
	assert.NotContains(t, healthy, "failed")
	churned := liveHedgeLesson([]liveHedgeResult{
		run("HTTP/2, no hedging", 100, 0, 1, 0), run("HTTP/2, hedge", 102, 2, 1, 3),
		run("HTTP/1.1, no hedging", 100, 0, 10, 0), run("HTTP/1.1, hedge", 102, 2, 100, 0),
	})
	assert.Contains(t, churned, "far more than its 2 losers")
	assert.Contains(t, churned, `HTTP/2, hedge: 3 calls failed, the first with "context canceled".`)
	assert.Contains(t, churned, "cuts bodies still on the way")
	assert.Empty(t, liveHedgeLesson(nil))
}
