package main

// The service variant of the fleet drill (service.go), in the tests.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serviceFleet is a run of TestServiceFleet: what the provider saw.
type serviceFleet struct {
	serviceSpec
	procs    int
	arrivals []time.Duration // sorted, from the provider's first request
	report   serviceReport   // of every process, added up
}

// runServiceFleet starts procs service processes of spec, 2s ahead of their
// common start so that all are ready, waits for them, and returns what the
// provider saw.
func runServiceFleet(t *testing.T, spec serviceSpec, procs int) serviceFleet {
	t.Helper()
	// A provider that is never down, never throttles, loses no reply: it
	// counts the requests that reach it.
	pr, err := newProvider(params{capacity: 1 << 30, window: time.Second}, 1, false)
	require.NoError(t, err)
	defer pr.close()
	spec.Provider = pr.url
	spec.Start = time.Now().Add(2 * time.Second)
	res := serviceFleet{serviceSpec: spec, procs: procs}
	wait, err := startServices(os.Args[0], []string{"-test.run=^$"}, spec, procs, os.Stderr)
	require.NoError(t, err)
	res.report, err = wait()
	assert.NoError(t, err)
	res.arrivals = pr.stats().arrivals
	return res
}

func (r serviceFleet) String() string {
	return fmt.Sprintf("%d processes x %d goroutines, limiter %s (%g/s, burst %d): the provider received %d requests in %v (%.1f/s), at most %d in any sliding second, %d in a clock second, by second %v; %d calls, %d delivered, stopped: %v; load average %s",
		r.procs, r.Goroutines, r.Limiter, r.Rate, r.Burst, len(r.arrivals), r.Duration, float64(len(r.arrivals))/r.Duration.Seconds(),
		peakPerSecond(r.arrivals), peakPerClockSecond(r.arrivals), bySecond(r.arrivals, 0, r.Duration), r.report.Calls, r.report.OK, r.report.Stopped,
		loadAverage())
}

// Four service processes, eight goroutines each, call one provider through
// retryhttp as fast as their limiters let them, for 4s: with one limit of
// 50/s (burst 5) shared through PostgreSQL or Redis, the provider sees at
// most the rate and the burst over any sliding second, and a burst more
// for attempts that wake late (the Slack), plus the requests on their way
// when a second begins (at most one per goroutine: an attempt reaches the
// provider a moment after its slot); with a limiter in each process, about
// four times the rate. The bounds hold at any machine speed; the lower ones
// ask for a quarter of the rate a shared limit allows and half of what four
// local ones do.
func TestServiceFleet(t *testing.T) {
	const procs, goroutines, rate, burst = 4, 8, 50, 5
	const duration = 4 * time.Second
	inFlight := procs * goroutines
	// A store timeout of 1s, not fleet's 100ms: under the race detector on
	// a loaded machine a round trip to PostgreSQL can take longer than
	// 100ms, which fails the limiter closed and stops calls; that is the
	// timeout's subject (fleet's own tests), not this test's, which is the
	// bound.
	spec := serviceSpec{Rate: rate, Burst: burst, Goroutines: goroutines, Duration: duration, Timeout: time.Second}

	shared := func(t *testing.T, kind, url string) {
		spec := spec
		spec.Limiter, spec.URL, spec.Name = kind, url, "service-"+strconv.FormatInt(time.Now().UnixNano(), 36)
		r := runServiceFleet(t, spec, procs)
		t.Log(r)
		assert.LessOrEqual(t, peakPerSecond(r.arrivals), rate+2*burst+inFlight, "requests in any sliding second")
		assert.LessOrEqual(t, len(r.arrivals), int(rate*duration.Seconds())+2*burst+inFlight, "requests in all")
		assert.GreaterOrEqual(t, len(r.arrivals), int(rate*duration.Seconds())/4, "the shared rate is used")
		assert.Empty(t, r.report.Stopped, "calls stopped")
		assertDelivered(t, r, inFlight)
	}
	t.Run("local", func(t *testing.T) {
		spec := spec
		spec.Limiter = localLimiter
		r := runServiceFleet(t, spec, procs)
		t.Log(r)
		assert.GreaterOrEqual(t, peakPerSecond(r.arrivals), 2*(rate+burst), "four local limiters let through more than one can")
		assert.LessOrEqual(t, peakPerSecond(r.arrivals), procs*(rate+2*burst)+inFlight, "requests in any sliding second")
		assert.Empty(t, r.report.Stopped, "calls stopped")
		assertDelivered(t, r, inFlight)
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("RETRY_POSTGRES_URL")
		if url == "" {
			t.Skip("needs PostgreSQL: set RETRY_POSTGRES_URL, or run from the repository's root: " +
				"bash -c 'source .ci/postgres; start_postgres; trap stop_postgres EXIT; cd retryriver && go test -run TestServiceFleet ./cmd/outage'")
		}
		shared(t, pgLimiter, url)
	})
	t.Run("redis", func(t *testing.T) {
		url := os.Getenv("RETRY_REDIS_URL")
		if url == "" {
			t.Skip("needs Redis: set RETRY_REDIS_URL, or run from the repository's root: " +
				"bash -c 'source .ci/redis; start_redis; trap stop_redis EXIT; cd retryriver && go test -run TestServiceFleet ./cmd/outage'")
		}
		shared(t, redisLimiter, url)
	})
}

// assertDelivered checks that every request the provider received was a
// delivered call, but those cut by the run's end (at most one per
// goroutine), and that no delivered call went unseen.
func assertDelivered(t *testing.T, r serviceFleet, inFlight int) {
	t.Helper()
	assert.GreaterOrEqual(t, len(r.arrivals), r.report.OK, "requests received against calls delivered")
	assert.LessOrEqual(t, len(r.arrivals), r.report.OK+inFlight, "requests received against calls delivered")
	assert.Positive(t, r.report.OK)
}

// The command's -service mode, small: two processes through a proxy that
// delays each request to the store by up to 20ms and drops the link for
// half a second, on each store it is given. What is asserted holds at any
// machine speed: the run's shape (every admission the provider saw, the
// drop as long as asked, a report with every figure); the figures
// themselves are the README's.
func TestServiceDrill(t *testing.T) {
	t.Parallel()
	stores := []struct{ name, kind, env string }{
		{"postgres", pgLimiter, "RETRY_POSTGRES_URL"},
		{"redis", redisLimiter, "RETRY_REDIS_URL"},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			url := os.Getenv(s.env)
			if url == "" {
				t.Skip("needs " + s.env + ": run from the repository's root: " +
					"bash -c 'source .ci/postgres; start_postgres; source .ci/redis; start_redis; trap \"stop_redis; stop_postgres\" EXIT; cd retryriver && go test -run TestServiceDrill ./cmd/outage'")
			}
			t.Parallel()
			args := []string{"-service", "2s", "-procs", "2", "-workers", "5", "-limiter", s.kind, "-delay", "0-20ms",
				"-store-timeout", "1s", "-drop", "500ms"}
			if s.kind == pgLimiter {
				args = append(args, "-db", url)
			} else {
				args = append(args, "-redis", url)
			}
			c, err := parseConfig(args, testWriter{t})
			require.NoError(t, err)
			r, err := serviceDrill(t.Context(), c, testWriter{t})
			require.NoError(t, err)
			assert.Equal(t, r.arrivals, len(r.admitted), "every request the provider received says when it was admitted")
			assert.Equal(t, 500*time.Millisecond, r.upAt-r.dropAt, "how long the link was away")
			if len(r.admitted) > 0 {
				assert.GreaterOrEqual(t, r.admitted[0], -time.Second, "admitted before the run")
			}
			var out strings.Builder
			reportService(&out, c, r)
			t.Log(out.String())
			for _, want := range []string{"in any 100ms: at most", "in any 1s: at most", "x the limit", "drop: the link was away 500ms",
				"a loopback proxy delays each request by a draw from 0s to 20ms (uniform", "load average"} {
				assert.Contains(t, out.String(), want)
			}
		})
	}
}
