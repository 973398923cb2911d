package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be the drill's worker process too, as the
// command is: the crash drill starts os.Executable() with workerEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// testScale keeps each drill to a few seconds: 300 jobs, a 0.3 s outage.
// (SQLite under the race detector runs River at well under 200 jobs/s.)
const testScale = 0.03

func databases(t *testing.T) []string {
	urls := []string{""}
	if u := os.Getenv("RETRY_POSTGRES_URL"); u != "" {
		urls = append(urls, u)
	} else {
		t.Log("RETRY_POSTGRES_URL is not set: PostgreSQL part skipped; run `bash .ci/test` from the repository root to run it")
	}
	return urls
}

func dbName(url string) string {
	if url == "" {
		return "sqlite"
	}
	return "postgres"
}

// assertDrill checks what every run must give: every job delivered,
// dead-lettered or cancelled, none left, each notification sent at most
// once, every delivered job sent.
func assertDrill(t *testing.T, r *result) {
	t.Helper()
	assert.Empty(t, check(r))
	assert.Equal(t, r.p.jobs, r.final.final(), "jobs accounted for")
	assert.Zero(t, r.final.other, "jobs left behind")
	assert.Equal(t, r.p.jobs, r.final.completed+r.final.discarded+r.final.cancelled)
	assert.LessOrEqual(t, r.provider.sent, r.p.jobs)
	assert.GreaterOrEqual(t, r.provider.sent, r.final.completed)
	assert.Positive(t, r.provider.down, "no attempt met the outage")
	assert.GreaterOrEqual(t, r.final.attempts, r.p.jobs+r.provider.down, "every attempt that met the outage needs another")
}

func TestDrill(t *testing.T) {
	t.Parallel()
	for _, url := range databases(t) {
		t.Run(dbName(url), func(t *testing.T) {
			t.Parallel()
			r, err := drill(t.Context(), config{url: url, scale: testScale, workers: 500, seed: 1, timeout: 5 * time.Minute}, testWriter{t})
			require.NoError(t, err)
			assertDrill(t, r)
			// One process, one limiter: no 1-second window of token times
			// holds more than the rate plus the burst (210). Attempts reach
			// the provider a little after their tokens, by more under the
			// race detector with other tests running (late timers arrive in
			// clumps), so the bound here is twice the rate; without the
			// limiter the 300 jobs would all arrive at once. The limiter's
			// spacing itself is asserted exactly in retryriver's
			// TestLimiterPacesAttempts. The command's figures at full scale, on an
			// idle machine, are in the README.
			assert.LessOrEqual(t, r.peak, 2*int(r.p.limit), "peak attempts per second")
			assert.Positive(t, r.final.unknownJobs, "attempts that met the outage timed out: outcome unknown")
			assert.LessOrEqual(t, r.final.reconcile, r.final.discarded+r.final.cancelled, "the reconciliation query selects stopped jobs only")
			assert.LessOrEqual(t, r.final.reconcile, r.final.unknownJobs)
		})
	}
}

// The crash drill: the worker process is killed (SIGKILL) with jobs in
// flight, a new one takes over (River's rescuer returns the stuck jobs to it
// once its leadership lease is free), and every job still ends delivered,
// dead-lettered or cancelled; the jobs that were running are marked
// outcome-unknown, and the provider's deduplication absorbs their repeats.
func TestCrashDrill(t *testing.T) {
	t.Parallel()
	for _, url := range databases(t) {
		t.Run(dbName(url), func(t *testing.T) {
			t.Parallel()
			r, err := drill(t.Context(), config{url: url, scale: testScale, crash: true, workers: 500, seed: 1, timeout: 5 * time.Minute}, testWriter{t})
			require.NoError(t, err)
			assertDrill(t, r)
			require.Positive(t, r.crashAt, "the worker was never killed")
			assert.Positive(t, r.crashRun, "no job was in flight when the worker was killed")
			assert.Less(t, r.crashFinal, r.p.jobs, "the worker was killed after the drill")
			assert.GreaterOrEqual(t, r.final.unknownJobs, r.crashRun, "every job running at the crash is marked outcome-unknown")
		})
	}
}

// The command's output: the figures, the chart, the check.
func TestRunPrintsFiguresAndChart(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "drill.svg")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-scale", "0.02", "-svg", svg}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	out := stdout.String()
	for _, want := range []string{"delivered", "dead-lettered (discarded)", "cancelled", "outcome-unknown", "attempts",
		"peak attempts per second", "drain time", "duplicates absorbed by the key", "virtual time", "0 left behind", "chart: " + svg} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, stderr.String(), "delivered", "progress on standard error")
	raw, err := os.ReadFile(svg)
	require.NoError(t, err)
	assertSVG(t, raw)
}

func assertSVG(t *testing.T, raw []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(raw))
	var texts []string
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if cd, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(cd))
		}
	}
	all := strings.Join(texts, " ")
	assert.Contains(t, all, "provider down")
	assert.Contains(t, all, "attempts per second")
	assert.Contains(t, string(raw), "<path d=\"M")
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-scale", "0"}, {"-scale", "2"}, {"-scale", "NaN"}, {"-policy", "other"}, {"-workers", "0"}, {"-nope"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &stdout, &stderr), "run(%v)", args)
		assert.NotEmpty(t, stderr.String(), "run(%v) said nothing", args)
	}
}

// The virtual-time drill at full scale: all delivered, the limiter's rate
// held, about 12,000 attempts.
func TestModelAtSeedScale(t *testing.T) {
	t.Parallel()
	p, err := paramsFor(1)
	require.NoError(t, err)
	m := model(p, 1)
	assert.Equal(t, 10_000, m.delivered+m.dead)
	assert.LessOrEqual(t, m.peak, int(p.limit)+p.burst)
	assert.GreaterOrEqual(t, m.peak, int(p.limit))
	assert.InDelta(t, 12_000, m.attempts, 300)
	assert.InDelta(t, 60, m.drain.Seconds(), 5)
}

func TestPeakPerSecond(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name     string
		arrivals []time.Duration
		want     int
	}{
		{"none", nil, 0},
		{"one", ms(5), 1},
		{"a second apart", ms(0, 1000, 2000), 1},
		{"within a second", ms(0, 999), 2},
		{"sliding", ms(0, 600, 900, 1500, 1800), 3},
	}
	for _, tt := range tests {
		if got := peakPerSecond(tt.arrivals); got != tt.want {
			t.Errorf("%s: peakPerSecond = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestChartMarksOutageAndCrash(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	c := chart{title: "t", arrivals: []time.Duration{0, time.Second, 3 * time.Second}, bin: time.Second,
		outage: time.Second, limit: 200, capacity: 300, drain: 4 * time.Second, crashAt: 2 * time.Second}
	require.NoError(t, c.write(&b))
	assertSVG(t, b.Bytes())
	assert.Contains(t, b.String(), "worker process killed")
	assert.Contains(t, b.String(), "limiter 200/s")
	assert.Equal(t, []float64{1, 1, 0, 1, 0}, c.rates())
}

// testWriter sends the drill's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
