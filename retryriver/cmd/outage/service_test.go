package main

// The service variant of the fleet drill: no queue, but N real processes,
// each a service whose goroutines call one loopback HTTP provider through
// retryhttp, as fast as their limiter lets them, with a limiter of each
// process's own or one limit shared by all of them through PostgreSQL or
// Redis. The provider counts what reaches it, from every process.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// serviceEnv marks a process started by TestServiceFleet as one of its
// services; its value is the serviceSpec, as JSON.
const serviceEnv = "RETRYRIVER_OUTAGE_SERVICE"

// serviceSpec is what each service process of the fleet runs.
type serviceSpec struct {
	Limiter    string // localLimiter, pgLimiter or redisLimiter
	URL        string // the shared limit's store
	Name       string // the shared limit's name
	Rate       float64
	Burst      int
	Goroutines int // in each process
	Start      time.Time
	Duration   time.Duration
	Provider   string
	Proc       int
}

// serviceReport is what a service process says on its standard output when
// it is done: its calls, delivered or stopped by reason.
type serviceReport struct {
	Calls, OK int
	Stopped   map[string]int
}

// serviceMain is a service process: its goroutines send requests through
// one retryhttp client whose policy's Limiter is the spec's, each with an
// Idempotency-Key (so a retry is safe), from Start for Duration.
func serviceMain(raw string) int {
	var s serviceSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	ctx, cancel := context.WithDeadline(context.Background(), s.Start.Add(s.Duration))
	defer cancel()
	lc := limiterConfig{kind: s.Limiter, url: s.URL, name: s.Name}
	lim, closeLimiter, err := lc.limiter(ctx, params{limit: s.Rate, burst: s.Burst})
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 1
	}
	defer closeLimiter()
	client := retryhttp.NewClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.Goroutines}},
		retry.Policy{MaxAttempts: 3, Limiter: lim, AttemptTimeout: 10 * time.Second})
	time.Sleep(time.Until(s.Start))
	var mu sync.Mutex
	rep := serviceReport{Stopped: map[string]int{}}
	var wg sync.WaitGroup
	for g := range s.Goroutines {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				err := call(ctx, client, s.Provider, fmt.Sprintf("service-%d-%d-%d", s.Proc, g, n))
				if err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
					// The run is over, or this call's slot is past its end
					// (retry.ErrNoTimeLeft): cut by the end, not stopped.
					return
				}
				mu.Lock()
				rep.Calls++
				if err == nil {
					rep.OK++
				} else {
					rep.Stopped[err.Error()]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// call sends one notification through client, and returns nil once the
// provider took it, or why not: the stop reason of a call retry gave up on.
func call(ctx context.Context, client *http.Client, url, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		var re *retry.Error
		if errors.As(err, &re) && re.Reason != nil {
			return re.Reason
		}
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

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
	res := serviceFleet{serviceSpec: spec, procs: procs, report: serviceReport{Stopped: map[string]int{}}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range procs {
		spec.Proc = i
		raw, err := json.Marshal(spec)
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), serviceEnv+"="+string(raw))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			var rep serviceReport
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if err := json.Unmarshal(lines.Bytes(), &rep); err != nil {
					t.Errorf("service %d said %q: %v", i, lines.Text(), err)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("service %d: %v", i, err)
			}
			mu.Lock()
			defer mu.Unlock()
			res.report.Calls += rep.Calls
			res.report.OK += rep.OK
			for e, n := range rep.Stopped {
				res.report.Stopped[e] += n
			}
		})
	}
	wg.Wait()
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
	spec := serviceSpec{Rate: rate, Burst: burst, Goroutines: goroutines, Duration: duration}

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
