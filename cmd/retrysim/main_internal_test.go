package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

// wellFormed reports an error unless data is well-formed XML.
func wellFormed(data []byte) error {
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestRunWritesTablesAndCharts runs the command on a small configuration
// (virtual time, no -live) and checks its tables and charts.
func TestRunWritesTablesAndCharts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-clients", "10,20", "-episodes", "4", "-jobs", "2000", "-calls", "3000", "-writes", "5000", "-out", dir}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	out := stdout.String()
	for _, want := range []string{
		"CONTENTION STUDY", "Write calls until every client has succeeded", "Time until the last client succeeds",
		"Against the published figures", "exponential", "full jitter", "equal jitter", "decorrelated", "no backoff",
		"OUTAGE DRILL: 2,000 notification jobs", "as given", "no jitter", "no limiter", "10% budget", "no limiter, 503 + Retry-After",
		"What became of the jobs", "What the provider saw", "retries/delivery", "Retry-After waits",
		"peak attempts/s", "peak once back", "p99 latency", "What each variant shows:",
		"What the contention study shows:", "  load: ", "  time: ", "  in short: ",
		"adaptive limiter", "River's default",
		"HEDGING STUDY: 3,000 calls", "At half its capacity (5,000 calls a second)", "Overloaded: 12,500 calls a second",
		"hedge at p95, budget", "adaptive hedge", "retry on timeout", "What the hedging study shows:", "  the tail: ",
		"  overloaded: ", "INGESTION PIPELINE: a storage outage leaves a backlog of 5,000 writes", "Fixed limits, swept (C = 100)",
		"The backlog after the outage", "C halves, from 100 to 50", "C doubles, from 100 to 200", "adaptive + breaker",
		"What the ingestion study shows:", "  the adaptive limit: ", "  with the breaker: ", "Charts (18 SVG files) written to " + dir,
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "LIVE DRILL")
	assert.Contains(t, stderr.String(), "contention: 10/10")
	assert.Contains(t, stderr.String(), "drill: no jitter, no limiter")
	assert.Contains(t, stderr.String(), "hedging: 15 runs of 3,000 calls")

	for _, name := range []string{
		"contention-calls.svg", "contention-time.svg", "drill-as-given.svg", "drill-no-jitter.svg",
		"drill-no-limiter.svg", "drill-no-jitter-no-limiter.svg", "drill-10pct-budget.svg",
		"drill-no-limiter-503-retry-after.svg", "drill-adaptive-limiter.svg", "drill-rivers-default.svg",
		"hedging-latency.svg", "hedging-overload-latency.svg", "hedging-overload-load.svg",
		"ingest-in-flight.svg", "ingest-stored.svg", "ingest-sweep.svg", "ingest-c-halves.svg", "ingest-c-doubles.svg",
	} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.NoError(t, wellFormed(data), name)
		assert.Contains(t, out, filepath.Join(dir, name))
	}
	calls, err := os.ReadFile(filepath.Join(dir, "contention-calls.svg"))
	require.NoError(t, err)
	times, err := os.ReadFile(filepath.Join(dir, "contention-time.svg"))
	require.NoError(t, err)
	for _, chart := range [][]byte{calls, times} {
		assert.Contains(t, string(chart), "has no capacity limit", "each contention chart says what its model leaves out")
	}
	for _, s := range []string{"exponential", "full jitter", "equal jitter", "decorrelated", "no backoff", "published (600 ep.)"} {
		assert.Contains(t, string(calls), `data-name="`+s+`"`)
	}
}

func TestRunOneStudy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stdout bytes.Buffer
	require.NoError(t, run([]string{"-study", "contention", "-clients", "30", "-episodes", "2", "-out", dir}, &stdout, io.Discard))
	assert.NotContains(t, stdout.String(), "OUTAGE DRILL")
	assert.Contains(t, stdout.String(), "No published figure at these client counts")
	files, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, files, 2)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		clients  []int
		episodes int
		study    string
		err      string
	}{
		{"defaults", nil, defaultClients, 100, "all", ""},
		{"quick", []string{"-quick"}, quickClients, 100, "all", ""},
		{"quick keeps explicit clients", []string{"-quick", "-clients", "5, 7"}, []int{5, 7}, 100, "all", ""},
		{"quick with fewer episodes", []string{"-quick", "-episodes", "10"}, quickClients, 10, "all", ""},
		{"quick keeps explicit episodes", []string{"-episodes", "600", "-quick"}, quickClients, 600, "all", ""},
		{"study", []string{"-study", "drill"}, defaultClients, 100, "drill", ""},
		{"hedging", []string{"-study", "hedging", "-calls", "500"}, defaultClients, 100, "hedging", ""},
		{"zero calls", []string{"-calls", "0"}, nil, 0, "", "-calls must be at least 1"},
		{"bad study", []string{"-study", "both"}, nil, 0, "", `-study: "both" is not contention, drill, hedging, ingest or all`},
		{"bad clients", []string{"-clients", "10,x"}, nil, 0, "", `-clients: "x" is not a positive whole number`},
		{"no clients", []string{"-clients", ","}, nil, 0, "", "-clients: no client count given"},
		{"zero episodes", []string{"-episodes", "0"}, nil, 0, "", "-episodes must be at least 1"},
		{"stray argument", []string{"extra"}, nil, 0, "", `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args, io.Discard)
			if tt.err != "" {
				assert.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.clients, c.clients)
			assert.Equal(t, tt.episodes, c.episodes)
			assert.Equal(t, tt.study, c.study)
			assert.Equal(t, uint64(1), c.seed)
		})
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"as given", "as-given"},
		{"no jitter, no limiter", "no-jitter-no-limiter"},
		{"10% budget", "10pct-budget"},
		{"live, as given", "live-as-given"},
	}
	for _, tt := range tests {
		got := slug(tt.in)
		assert.Equal(t, tt.want, got, "slug(%q) = %q, want %q", tt.in, got, tt.want)
	}
}

// TestLiveProvider drives the loopback provider's handler on a fake clock:
// no network, no sleep.
func TestLiveProvider(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newLiveProvider(func() time.Time { return now }, time.Second, 2, 0, 1)
	p.begin()
	done, cancel := context.WithCancel(context.Background())
	cancel() // a client that has already given up: the hanging handler returns at once

	serve := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(done, http.MethodPost, "/notify", nil)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		return rec
	}

	// Down: no answer at all.
	now = now.Add(999 * time.Millisecond)
	rec := serve("job-1")
	assert.Zero(t, rec.Body.Len())
	assert.Empty(t, rec.Header())

	// Up, in the window [1s, 2s): two served, then 429 with Retry-After.
	now = now.Add(time.Millisecond)
	assert.Equal(t, http.StatusOK, serve("job-1").Code)
	assert.Equal(t, http.StatusOK, serve("job-1").Code, "a duplicate is answered 200")
	rec = serve("job-2")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	err := retry.CheckResponse(rec.Result())
	var re *retry.ResponseError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, time.Second, re.RetryAfter)

	// The next window serves again.
	now = now.Add(time.Second)
	assert.Equal(t, http.StatusOK, serve("job-2").Code)

	assert.Equal(t, http.StatusBadRequest, serve("").Code, "no key, no service")

	r := p.result("t", 2, []time.Duration{time.Second}, nil, 2*time.Second)
	var results []sim.AttemptResult
	var at []time.Duration
	for _, a := range r.Attempts {
		results = append(results, a.Result)
		at = append(at, a.At)
	}
	assert.Equal(t, []sim.AttemptResult{sim.Down, sim.Sent, sim.Duplicate, sim.Throttled, sim.Sent}, results)
	assert.Equal(t, []time.Duration{999 * time.Millisecond, time.Second, time.Second, time.Second, 2 * time.Second}, at)
	assert.Equal(t, 2, r.Sent)
	assert.Equal(t, 1, r.Summary.Duplicates)
	assert.Equal(t, 5, r.Summary.Attempts)
	assert.Equal(t, 3, r.Summary.PeakPerSecond, "three in the clock second [1s, 2s)")
	assert.Equal(t, 3, r.Summary.PeakUp)
	assert.Equal(t, 1, r.InOutage())
	assert.Equal(t, 2, r.Attempts[4].N, "job-2's second attempt")
	assert.Equal(t, 2, r.Attempts[4].Job)
}

func TestLiveProviderHoldsLostReplies(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newLiveProvider(func() time.Time { return now }, 0, 10, 1, 1) // every reply lost
	p.begin()
	p.close() // frees the held handler at once
	req := httptest.NewRequest(http.MethodPost, "/notify", nil)
	req.Header.Set("Idempotency-Key", "job-3")
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	assert.Zero(t, rec.Body.Len())
	r := p.result("t", 1, nil, nil, 0)
	require.Len(t, r.Attempts, 1)
	assert.Equal(t, sim.LostReply, r.Attempts[0].Result)
	assert.Equal(t, 1, r.Sent, "sent, though the reply is held")
	p.close() // twice is fine
}

func TestTablesMarkNothingDelivered(t *testing.T) {
	t.Parallel()
	results := []sim.DrillResult{{Name: "none", Summary: sim.Summary{Jobs: 3, DeadLettered: 3, Attempts: 15}}}
	var out strings.Builder
	writeOutcomeTable(&out, results)
	lines := strings.Split(out.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 4)
	assert.Equal(t, []string{"none", "0", "3", "0.0", "s", "-", "-", "0"}, strings.Fields(lines[3]))
	out.Reset()
	writeLoadTable(&out, results)
	lines = strings.Split(out.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 4)
	assert.Equal(t, []string{"none", "15", "0", "0", "-", "0", "0", "0"}, strings.Fields(lines[3]))
}

// FuzzParseInts checks the -clients parser: it never panics, and what it
// accepts is a non-empty list of positive counts that it reads back the same.
func FuzzParseInts(f *testing.F) {
	for _, s := range []string{"10,20,30", " 5 , 7 ", "", ",", "0", "-1", "1e3", "99999999999999999999", "3,,4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := parseInts(s)
		if err != nil {
			if ns != nil {
				t.Fatalf("parseInts(%q) = %v with error %v", s, ns, err)
			}
			return
		}
		if len(ns) == 0 {
			t.Fatalf("parseInts(%q) accepted an empty list", s)
		}
		for _, n := range ns {
			if n < 1 {
				t.Fatalf("parseInts(%q) = %v, holds %d", s, ns, n)
			}
		}
		again, err := parseInts(joinInts(ns))
		if err != nil || !slices.Equal(again, ns) {
			t.Fatalf("parseInts(joinInts(%v)) = %v, %v", ns, again, err)
		}
	})
}
