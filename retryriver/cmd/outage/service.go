package main

// The service variant of the fleet drill: no queue, but N real processes,
// each a service whose goroutines call one loopback HTTP provider through
// retryhttp, as fast as their limiter lets them, with a limiter of each
// process's own or one limit shared by all of them through PostgreSQL or
// Redis. The provider counts what reaches it, from every process. It runs
// in TestServiceFleet, and as the command's -service mode, which measures
// the shared limit under excess demand on a link to its store that is
// delayed (-delay, -back-delay) and dropped (-drop).

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// serviceEnv marks a process started as one of the service fleet's
// services; its value is the serviceSpec, as JSON.
const serviceEnv = "RETRYRIVER_OUTAGE_SERVICE"

// serviceSpec is what each service process of the fleet runs.
type serviceSpec struct {
	Limiter    string // localLimiter, pgLimiter or redisLimiter
	URL        string // the shared limit's store
	Name       string // the shared limit's name
	Rate       float64
	Burst      int
	Timeout    time.Duration // fleet.Options.Timeout; 0: fleet's default
	Fallback   float64       // fleet.Options.Fallback; 0: fail closed
	Goroutines int           // in each process
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

func (r *serviceReport) add(o serviceReport) {
	r.Calls += o.Calls
	r.OK += o.OK
	if r.Stopped == nil {
		r.Stopped = map[string]int{}
	}
	for e, n := range o.Stopped {
		r.Stopped[e] += n
	}
}

// stamped is the base transport of a service's retryhttp client: it sends
// each attempt with the time it was admitted (attemptHeader), since it runs
// once the loop's limiter has let the attempt start.
type stamped struct{ base http.RoundTripper }

func (s stamped) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(attemptHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.base.RoundTrip(r)
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
	lc := limiterConfig{kind: s.Limiter, url: s.URL, name: s.Name, timeout: s.Timeout, fallback: s.Fallback}
	lim, closeLimiter, err := lc.limiter(ctx, params{limit: s.Rate, burst: s.Burst})
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 1
	}
	defer closeLimiter()
	client := retryhttp.NewClient(&http.Client{Transport: stamped{&http.Transport{MaxIdleConnsPerHost: s.Goroutines}}},
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
				if err != nil {
					// A call its limiter refused (failing closed while the
					// store is away) comes back at once: a user would not
					// ask again within the same millisecond, and a loop
					// that did would take the machine's CPUs from the rest
					// of the fleet.
					time.Sleep(10 * time.Millisecond)
				}
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

// startServices starts procs service processes of spec (exe with args, and
// serviceEnv set); wait waits for them and adds up what they reported.
func startServices(exe string, args []string, spec serviceSpec, procs int, stderr io.Writer) (wait func() (serviceReport, error), err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := serviceReport{Stopped: map[string]int{}}
	var errs []error
	fail := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	for i := range procs {
		spec.Proc = i
		raw, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), serviceEnv+"="+string(raw))
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("outage: starting a service process: %w", err)
		}
		wg.Go(func() {
			var rep serviceReport
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if err := json.Unmarshal(lines.Bytes(), &rep); err != nil {
					fail(fmt.Errorf("service %d said %q: %w", i, lines.Text(), err))
				}
			}
			if err := cmd.Wait(); err != nil {
				fail(fmt.Errorf("service %d: %w", i, err))
			}
			mu.Lock()
			defer mu.Unlock()
			total.add(rep)
		})
	}
	return func() (serviceReport, error) {
		wg.Wait()
		return total, errors.Join(errs...)
	}, nil
}

// serviceRun is what the -service mode measured.
type serviceRun struct {
	spec     serviceSpec
	procs    int
	link     linkConfig
	admitted []time.Duration // sorted, from spec.Start
	arrivals int             // requests the provider received
	report   serviceReport
	// When the link to the store was dropped and came back, from
	// spec.Start; zero without -drop.
	dropAt, upAt time.Duration
	load         string // load averages at the start
}

// serviceDrill runs the service fleet of c for c.service: c.procs
// processes of c.workers goroutines each, calling a provider that always
// answers, as fast as one shared limit (c.rate and c.burst, by default the
// drill's) lets them, the
// limiters reaching their store through a proxy that delays each request
// and each reply by c.link's draws and, with -drop, drops the link a third
// of the way in.
func serviceDrill(ctx context.Context, c config, stderr io.Writer) (*serviceRun, error) {
	p, err := paramsFor(1)
	if err != nil {
		return nil, err
	}
	link := c.link
	link.proxied = c.drop > 0
	ls, err := openLimitStore(ctx, c.limiter, c.url, c.redisURL, false, link)
	if err != nil {
		return nil, err
	}
	defer ls.close()
	pr, err := newProvider(params{capacity: 1 << 30, window: time.Second}, c.seed, false)
	if err != nil {
		return nil, err
	}
	defer pr.close()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec := serviceSpec{Limiter: c.limiter, URL: ls.url, Name: "outage-service-" + rand.Text()[:12],
		Rate: cmp.Or(c.rate, p.limit), Burst: cmp.Or(c.burst, p.burst),
		Timeout: c.storeTimeout, Fallback: c.fallback, Goroutines: c.workers, Duration: c.service, Provider: pr.url,
		// Time for every process to start and connect before the first call.
		Start: time.Now().Add(time.Second + time.Duration(c.procs)*250*time.Millisecond)}
	run := &serviceRun{spec: spec, procs: c.procs, link: c.link, load: loadAverage()}
	fmt.Fprintf(stderr, "outage: %d service processes x %d goroutines for %v\n", c.procs, c.workers, c.service)
	wait, err := startServices(exe, nil, spec, c.procs, stderr)
	if err != nil {
		return nil, err
	}
	var back <-chan error
	if c.drop > 0 {
		select {
		case <-time.After(time.Until(spec.Start.Add(c.service / 3))):
		case <-ctx.Done():
		}
		run.dropAt = time.Since(spec.Start)
		back = ls.link.Drop(c.drop)
		fmt.Fprintf(stderr, "outage: %5.1fs  dropped the limiters' link to %s for %v\n", run.dropAt.Seconds(), c.limiter, c.drop)
	}
	rep, err := wait()
	if back != nil {
		if err := <-back; err != nil {
			return nil, err
		}
		run.upAt = run.dropAt + c.drop
	}
	if err != nil {
		return nil, err
	}
	st := pr.stats()
	run.report, run.arrivals = rep, len(st.arrivals)
	shift := pr.started().Sub(spec.Start) // the provider's clock starts at its first request
	for _, a := range st.admitted {
		run.admitted = append(run.admitted, a+shift)
	}
	return run, nil
}

// reportService prints what the service fleet measured.
func reportService(w io.Writer, c config, r *serviceRun) {
	s := r.spec
	fmt.Fprintf(w, "SERVICE FLEET, real time: %d processes x %d goroutines calling one loopback provider through retryhttp for %v, as fast as their limiter lets them\n",
		r.procs, s.Goroutines, s.Duration)
	lc := limiterConfig{kind: s.Limiter, fallback: s.Fallback}
	timeout := "fleet's default of 100ms"
	if s.Timeout > 0 {
		timeout = s.Timeout.String()
	}
	fmt.Fprintf(w, "limiter: %s; store timeout %s\n", lc.describe(params{limit: s.Rate, burst: s.Burst}, r.procs), timeout)
	fmt.Fprintf(w, "link to the store: %s", r.link.describe())
	if r.upAt > 0 {
		fmt.Fprintf(w, "; dropped (connections closed, new ones refused) from %.2f s to %.2f s", r.dropAt.Seconds(), r.upAt.Seconds())
	}
	fmt.Fprintln(w)
	n := len(r.admitted)
	fmt.Fprintf(w, "admitted: %d attempts in %v: %.1f/s, %.3f x the limit (after the first second %.3f x; the provider received %d)\n",
		n, s.Duration, float64(n)/s.Duration.Seconds(), float64(n)/s.Duration.Seconds()/s.Rate,
		float64(len(window(r.admitted, time.Second, s.Duration)))/(s.Duration-time.Second).Seconds()/s.Rate, r.arrivals)
	reportWindows(w, r.admitted, s.Rate, s.Burst)
	fmt.Fprintf(w, "  by second: %v\n", bySecond(r.admitted, 0, s.Duration))
	if r.upAt > 0 {
		cost, gap := dropCost(r.admitted, r.dropAt, s.Duration, s.Rate)
		d := r.upAt - r.dropAt
		resumed := "never"
		if after := window(r.admitted, r.upAt, s.Duration); len(after) > 0 {
			resumed = (after[0] - r.upAt).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "drop: the link was away %v; from its drop to the end (%v) the fleet lost %v of throughput at the limit (target: at most %v);\n  longest time without an admission %v; first admission %s after the link came back\n",
			d, (s.Duration - r.dropAt).Round(time.Millisecond), cost.Round(time.Millisecond), d+100*time.Millisecond, gap.Round(time.Millisecond), resumed)
	}
	fmt.Fprintf(w, "calls: %d, %d delivered, stopped: %v\n", r.report.Calls, r.report.OK, r.report.Stopped)
	fmt.Fprintf(w, "machine: load average %s at the start, %s at the end (1, 5 and 15 minutes; %d CPUs)\n", r.load, loadAverage(), runtime.NumCPU())
	fmt.Fprintf(w, "(admitted: when the loop's limiter let an attempt start, on its process's clock; above the bound: an attempt in some window of that length holding more than rate x window + burst)\n")
}

// describe says what the link between the limiters and their store does.
func (l linkConfig) describe() string {
	if !l.delayed() {
		return "loopback, no delay"
	}
	var ways []string
	if l.maxDelay > 0 {
		ways = append(ways, fmt.Sprintf("each request by a draw from %v to %v", l.minDelay, l.maxDelay))
	}
	if l.maxReplyDelay > 0 {
		ways = append(ways, fmt.Sprintf("each reply by a draw from %v to %v", l.minReplyDelay, l.maxReplyDelay))
	}
	return fmt.Sprintf("a loopback proxy delays %s (uniform, seed %d)", strings.Join(ways, " and "), l.seed)
}
