package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be the drill's worker process too, as the
// command is (the crash drill and the fleet start os.Executable() with
// workerEnv set), and a process of TestServiceFleet's.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain(os.Args[1:]))
	}
	if spec := os.Getenv(serviceEnv); spec != "" {
		os.Exit(serviceMain(spec))
	}
	os.Exit(m.Run())
}

// drillSize returns the scale and the River workers of the drills the
// tests run on url's database: by default 100 jobs on 10 workers, which
// keeps the package's tests short on a loaded machine (500 workers on one
// SQLite connection starve River's own operations there); with
// RETRY_LONG=1, the command's full size, 10,000 jobs on 500 workers, one
// drill at a time. Not on SQLite under the race detector, which runs the
// pure-Go SQLite about 50 times slower (BenchmarkThroughput: 41 jobs/s
// through River with -race, 2,400 without), so the full drill would not
// end: run RETRY_LONG=1 without -race for it.
func drillSize(t *testing.T, url string) (scale float64, workers int) {
	if os.Getenv("RETRY_LONG") != "" {
		if url != "" || !raceDetector {
			return 1, 500
		}
		t.Log("RETRY_LONG=1 under the race detector: SQLite runs the small drill; run without -race for the full one")
	}
	t.Parallel()
	return 0.01, 10
}

// stall bounds a drill that is stuck (no job became final and the provider
// had no request for that long), never one that runs slowly: no test
// assertion depends on how fast the machine is.
const stall = 3 * time.Minute

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

// assertDrill checks what every run must give, whatever the machine's
// speed: check's findings (every job delivered, dead-lettered or
// cancelled; each notification sent at most once, counted per key where
// the provider sends; every delivered job's notification sent; every job
// that met the outage marked outcome-unknown, and every job the crash
// killed marked or reconciled), and the outage itself: the provider's
// first requests, as many as the drill says.
func assertDrill(t *testing.T, r *result) {
	t.Helper()
	assert.Empty(t, check(r))
	assert.Equal(t, r.p.outage, r.provider.metOutage(), "requests that met the outage")
	assert.NotEmpty(t, r.provider.down, "no job met the outage")
	assert.GreaterOrEqual(t, r.provider.sent(), r.final.completed)
	assert.LessOrEqual(t, r.reconciled(), r.final.discarded+r.final.cancelled, "the reconciliation query selects stopped jobs only")
	most, _ := r.provider.mostSent()
	mostIn, _ := r.provider.mostReceived()
	t.Logf("requests received: %d, at most %d per key; notifications sent: %d, at most %d per key; %d requests absorbed by the key",
		len(r.provider.arrivals), mostIn, r.provider.sent(), most, r.provider.dups)
}

func TestDrill(t *testing.T) {
	if os.Getenv("RETRY_LONG") == "" {
		t.Parallel()
	}
	for _, url := range databases(t) {
		t.Run(dbName(url), func(t *testing.T) {
			scale, workers := drillSize(t, url)
			r, err := drill(t.Context(), config{url: url, scale: scale, workers: workers, seed: 1, stall: stall}, testWriter{t})
			require.NoError(t, err)
			assertDrill(t, r)
			// One process, one limiter. In any second of arrivals at the
			// provider, the attempts that passed the limiter in that second
			// (at most the rate, a burst, and a burst again for those that
			// woke within the burst's refill time of their token) plus those
			// already on their way (one per worker at most): however the
			// machine stalls, not more. Without the limiter every job would
			// arrive at once. The limiter's spacing itself is asserted
			// exactly in retryriver's TestLimiterPacesAttempts; the command's
			// figures at full scale are in the README.
			assert.LessOrEqual(t, r.peak, int(r.p.limit)+2*r.p.burst+workers, "peak attempts per second")
		})
	}
}

// The crash drill: the worker process is killed (SIGKILL) with jobs in
// flight, a new one takes over (River's rescuer returns the stuck jobs to it
// once its leadership lease is free), and every job still ends delivered,
// dead-lettered or cancelled; the jobs that were running are marked
// outcome-unknown or found by the reconciliation query, and the provider's
// deduplication absorbs their repeats.
func TestCrashDrill(t *testing.T) {
	if os.Getenv("RETRY_LONG") == "" {
		t.Parallel()
	}
	for _, url := range databases(t) {
		t.Run(dbName(url), func(t *testing.T) {
			scale, workers := drillSize(t, url)
			r, err := drill(t.Context(), config{url: url, scale: scale, crash: true, workers: workers, seed: 1, stall: stall}, testWriter{t})
			require.NoError(t, err)
			assertDrill(t, r)
			require.Positive(t, r.crashAt, "the worker was never killed")
			assert.NotEmpty(t, r.killed, "no job was in flight when the worker was killed")
			assert.Less(t, r.crashFinal, r.p.jobs, "the worker was killed after the drill")
		})
	}
}

// Each of check's findings can be found: a provider that does not
// deduplicate, on loopback, sends a key's notification twice, and check
// says so; so it does for a job that met the outage but is not marked, a
// delivered job never sent, a notification for no job's key, and a job the
// crash killed that is neither marked nor reconciled.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	t.Parallel()
	p := params{jobs: 2, outage: 1, capacity: 100, window: time.Second}
	send := func(pr *provider, key string, timeout time.Duration) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, pr.url, nil)
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	seen := func(dedupe bool) stats {
		pr, err := newProvider(p, 1, dedupe)
		require.NoError(t, err)
		defer pr.close()
		send(pr, "a", 50*time.Millisecond) // meets the outage, times out
		send(pr, "a", time.Minute)
		send(pr, "a", time.Minute) // the reply to the last one was lost, say
		send(pr, "stray", time.Minute)
		return pr.stats()
	}
	good := []outcome{{id: 1, key: "a", state: "completed", unknown: 1}, {id: 2, key: "b", state: "cancelled"}}
	result := func(st stats, jobs []outcome, killed ...int64) *result {
		return &result{p: p, marks: true, final: counts{completed: 1, cancelled: 1}, jobs: jobs, provider: st, killed: killed}
	}

	deduped := seen(true)
	assert.Equal(t, map[string]int{"a": 3, "stray": 1}, deduped.received)
	assert.Equal(t, map[string]int{"a": 1, "stray": 1}, deduped.effects)
	assert.Equal(t, 1, deduped.dups)
	assert.Equal(t, []string{"the provider sent 1 notifications for keys no job has"}, check(result(deduped, good)))

	delete(deduped.effects, "stray")
	assert.Empty(t, check(result(deduped, good)))
	assert.Equal(t, []string{"the provider sent 1 notifications more than once (one of them 2 times)", "the provider sent 1 notifications for keys no job has"},
		check(result(seen(false), good)))
	assert.Equal(t, []string{"1 jobs met the outage (an attempt timed out) but are not marked outcome-unknown"},
		check(result(deduped, []outcome{{id: 1, key: "a", state: "completed"}, good[1]})))
	assert.Equal(t, []string{"1 jobs delivered whose notification was never sent"},
		check(result(deduped, []outcome{good[0], {id: 2, key: "b", state: "completed"}})))
	assert.Equal(t, []string{"1 of the 2 jobs running when the worker was killed are neither marked outcome-unknown nor reconciled"},
		check(result(deduped, good, 1, 2)))
	reconciled := []outcome{good[0], {id: 2, key: "b", state: "cancelled", reconcile: true}}
	assert.Empty(t, check(result(deduped, reconciled, 1, 2)))
}

// The command's output: the figures, the chart, the check.
func TestRunPrintsFiguresAndChart(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "drill.svg")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-scale", "0.01", "-workers", "10", "-svg", svg}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	out := stdout.String()
	for _, want := range []string{"delivered", "dead-lettered (discarded)", "cancelled", "outcome-unknown", "attempts",
		"peak attempts per second", "drain time", "duplicates absorbed by the key", "virtual time", "0 left behind", "chart: " + svg,
		"requests for 100 keys", "100 notifications sent, 0 of them more than once (at most 1 per idempotency key);\n  20 attempts met the outage"} {
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
	for _, args := range [][]string{{"-scale", "0"}, {"-scale", "2"}, {"-scale", "NaN"}, {"-policy", "other"}, {"-workers", "0"}, {"-nope"},
		{"-procs", "0"}, {"-procs", "2", "-crash"}, {"-db", "postgres://x", "-procs", "2", "-crash"}, {"-limiter", "other"}, {"-limiter", "pg"},
		{"-db", "postgres://x", "-limiter", "pg", "-policy", "river"}, {"-kill-store", "1s"}, {"-limiter", "redis", "-kill-store", "-1s"},
		{"-fallback", "0.5"}, {"-limiter", "redis", "-fallback", "2"}, {"-limiter", "redis", "-fallback", "NaN"},
		{"-delay", "0-100ms"}, {"-limiter", "redis", "-delay", "100ms-10ms"}, {"-limiter", "redis", "-delay", "fast"},
		{"-limiter", "redis", "-delay", "-5ms"}, {"-back-delay", "0-100ms"}, {"-delay", "10ms", "-back-delay", "0-100ms"},
		{"-limiter", "redis", "-back-delay", "100ms-10ms"}, {"-limiter", "redis", "-back-delay", "slow"}, {"-drop", "2s"}, {"-limiter", "redis", "-drop", "-1s"},
		{"-limiter", "redis", "-drop", "1s", "-kill-store", "1s"}, {"-store-timeout", "1s"}, {"-limiter", "redis", "-store-timeout", "-1s"},
		{"-service", "3s"}, {"-limiter", "redis", "-service", "-1s"}, {"-limiter", "redis", "-service", "3s", "-crash"},
		{"-limiter", "redis", "-service", "3s", "-kill-store", "1s"}, {"-limiter", "redis", "-rate", "100"},
		{"-limiter", "redis", "-service", "3s", "-rate", "-1"}, {"-limiter", "redis", "-service", "3s", "-burst", "-1"},
		{"-limiter", "redis", "-service", "3s", "-rate", "NaN"}} {
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

// The per-second counts of the fleet's report: clock seconds from the
// provider's first request, a window, and seconds from a moment on.
func TestPerSecondCounts(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	a := ms(700, 800, 900, 1100, 1200, 3500)
	assert.Equal(t, 3, peakPerClockSecond(a), "0.7, 0.8 and 0.9 s")
	assert.Equal(t, 5, peakPerSecond(a), "0.7 to 1.2 s")
	assert.Zero(t, peakPerClockSecond(nil))
	assert.Equal(t, ms(900, 1100), window(a, 900*time.Millisecond, 1200*time.Millisecond))
	assert.Empty(t, window(a, 2*time.Second, time.Second), "an empty window")
	assert.Equal(t, []int{3, 0}, bySecond(a, 900*time.Millisecond, 3500*time.Millisecond), "whole seconds: 0.9 to 2.9 s")
	assert.Equal(t, []int{}, bySecond(a, time.Second, time.Second))
}

func TestChartMarksOutageAndCrash(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	c := chart{title: "t", arrivals: []time.Duration{0, time.Second, 3 * time.Second}, bin: time.Second,
		outage: time.Second, limit: 200, limitLabel: "limiter 200/s", capacity: 300, drain: 4 * time.Second, crashAt: 2 * time.Second,
		storeDown: 2 * time.Second, storeUp: 3 * time.Second}
	require.NoError(t, c.write(&b))
	assertSVG(t, b.Bytes())
	assert.Contains(t, b.String(), "worker process killed")
	assert.Contains(t, b.String(), "limiter's store down")
	assert.Contains(t, b.String(), "limiter 200/s")
	assert.Equal(t, []float64{1, 1, 0, 1, 0}, c.rates())
}

// testWriter sends the drill's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
