package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/retryhttp"
)

// The live drill is the simulated drill for real, at a tenth of its times
// and at the same rates: goroutines call through retry.Do against a loopback
// HTTP server that hangs for the first second (the attempts time out), then
// serves 300 requests per second and answers 429 with Retry-After above that.
const (
	defaultLiveJobs = 600
	liveOutage      = time.Second
	liveCapacity    = 300
	liveLost        = 0.01
	liveBound       = 30 * time.Second // no live call lasts longer, whatever happens
)

// livePolicy is DrillPolicy at a tenth of its times: the same rates, the
// same attempts, waits and timeout ten times shorter.
func livePolicy() retry.Policy {
	return retry.Policy{
		MaxAttempts:    5,
		Backoff:        retry.Exponential{Base: 50 * time.Millisecond, Cap: 3 * time.Second},
		Limiter:        retry.RateLimiter(rate.NewLimiter(liveLimit, 20)),
		AttemptTimeout: 200 * time.Millisecond,
	}
}

// liveLimit is the live policy's limiter rate, per second.
const liveLimit = 200

// limitOf returns the rate of the live policy's limiter, 0 if it has none.
func limitOf(p retry.Policy) float64 {
	if p.Limiter == nil {
		return 0
	}
	return liveLimit
}

// liveDrill runs the live drill twice, with the policy as given and without
// its limiter, and prints the same tables as the simulated drill.
func liveDrill(c config, stdout, stderr io.Writer) ([]string, error) {
	fmt.Fprintf(stdout, "\nLIVE DRILL: %d jobs, each a goroutine sending through retryhttp to a loopback HTTP server (real time)\n", c.liveJobs)
	fmt.Fprintf(stdout, "Server: hangs for %v (attempts time out), then serves %d requests per clock second and answers 429 with\n", liveOutage, liveCapacity)
	fmt.Fprintf(stdout, "  Retry-After: 1 above that; dedups by Idempotency-Key; holds %.0f%% of served replies until the client gives up.\n", 100*liveLost)
	fmt.Fprintf(stdout, "Policy: the drill's at a tenth of its times: MaxAttempts 5, Exponential{Base: 50ms, Cap: 3s}, AttemptTimeout 200ms,\n")
	fmt.Fprintf(stdout, "  rate.NewLimiter(200, 20), all in a retryhttp.NewClient (Do reserves a token when it decides to retry).\n")
	variants := []struct {
		name   string
		policy retry.Policy
	}{
		{liveAsGiven, livePolicy()},
		{liveNoLimiter, func() retry.Policy { p := livePolicy(); p.Limiter = nil; return p }()},
	}
	var results []sim.DrillResult
	for i, v := range variants {
		fmt.Fprintf(stderr, "live: %s (a few seconds)\n", v.name)
		r, err := runLive(v.name, v.policy, c.liveJobs, c.seed+uint64(i))
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	writeOutcomeTable(stdout, results)
	writeLiveLoadTable(stdout, results)
	lessons := liveLessons(results)
	fmt.Fprintf(stdout, "\nWhat each run shows:\n")
	for _, r := range results {
		writeWrapped(stdout, "  "+r.Name+": ", lessons[r.Name], 114)
	}
	writeDrillNotes(stdout, results)

	var files []string
	for i, r := range results {
		ch := drillChart(r, liveCapacity, limitOf(variants[i].policy), "server down", lessons[r.Name])
		ch.Title = fmt.Sprintf("Drill, %s: what reached the loopback server, per second", r.Name)
		name := filepath.Join(c.out, "drill-"+slug(r.Name)+".svg")
		if err := ch.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// Names of the live runs.
const (
	liveAsGiven   = "live, as given"
	liveNoLimiter = "live, no limiter"
)

// writeLiveLoadTable is writeLoadTable for the live runs, with what the
// server saw of the waits after its 429s.
func writeLiveLoadTable(w io.Writer, results []sim.DrillResult) {
	fmt.Fprintf(w, "\nWhat the server saw\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tattempts\tin the outage\t429s\t429s retried\tRetry-After waits\tshortest wait after a 429\tretries/delivery\tpeak attempts/s\tpeak once back\t")
	for _, r := range results {
		s := r.Summary
		rpd := "-"
		if v := s.RetriesPerDelivered(); !math.IsNaN(v) {
			rpd = fmt.Sprintf("%.2f", v)
		}
		shortest := "-"
		if gap, ok := shortestGapAfter(r, sim.Throttled); ok {
			shortest = fmt.Sprintf("%.3f s", gap.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Name, count(s.Attempts), count(r.InOutage()), count(r.Count(sim.Throttled)), count(r.RetriedAfter(sim.Throttled)),
			count(len(r.ServerWaits)), shortest, rpd, count(s.PeakPerSecond), count(s.PeakUp))
	}
	tw.Flush()
	fmt.Fprintln(w, "(429s retried: 429s followed by another attempt of the same job; Retry-After waits: retries whose wait the")
	fmt.Fprintln(w, " server's delay set, as Policy.Observe reported them (Event.WaitSetBy); the shortest wait after a 429 as the server")
	fmt.Fprintln(w, " saw it, against the Retry-After: 1 it sent; peak: the most attempts in one clock second [k s, k+1 s), the bins")
	fmt.Fprintln(w, " the charts draw; once back: from the first second the server is up)")
}

// shortestGapAfter returns the shortest time between an attempt with the
// given result and the same job's next attempt, and whether there was one.
func shortestGapAfter(r sim.DrillResult, res sim.AttemptResult) (time.Duration, bool) {
	last := map[int]sim.Attempt{}
	var shortest time.Duration
	found := false
	for _, a := range r.Attempts {
		if p, ok := last[a.Job]; ok && p.Result == res {
			if gap := a.At - p.At; !found || gap < shortest {
				shortest, found = gap, true
			}
		}
		last[a.Job] = a
	}
	return shortest, found
}

// liveLessons returns one sentence per live run, as drillLessons does.
func liveLessons(results []sim.DrillResult) map[string]string {
	out := map[string]string{}
	if len(results) != 2 {
		return out
	}
	given, noLimiter := &results[0], &results[1]
	l := limiterLesson(given, noLimiter)
	out[given.Name] = "For real, through retryhttp: " + strings.ToLower(l[:1]) + l[1:]
	lead := "Without the limiter"
	if 2*noLimiter.InOutage() > noLimiter.Summary.Attempts {
		lead = "Without the limiter, the jobs spend their attempts in the outage"
	}
	out[noLimiter.Name] = fmt.Sprintf("%s: %s of %s meet it (%s of %s with the limiter), and %s dead-lettered (%s with the limiter).",
		lead, count(noLimiter.InOutage()), plural(noLimiter.Summary.Attempts, "attempt"), count(given.InOutage()), count(given.Summary.Attempts),
		isAre(noLimiter.Summary.DeadLettered, "job"), count(given.Summary.DeadLettered))
	return out
}

// runLive serves the provider on 127.0.0.1, runs one goroutine per job
// through a retryhttp client, and summarises what the server saw.
func runLive(name string, p retry.Policy, jobs int, seed uint64) (sim.DrillResult, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sim.DrillResult{}, err
	}
	prov := newLiveProvider(time.Now, liveOutage, liveCapacity, liveLost, seed)
	srv := &http.Server{Handler: prov, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed after Shutdown
	defer func() {
		prov.close() // frees the handlers still holding a reply
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // best effort: the run's numbers are already in
	}()

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only
	tr.MaxIdleConnsPerHost = jobs
	defer tr.CloseIdleConnections()
	// Observe counts the waits the server's Retry-After set, and hands each
	// job the reason its call stopped.
	var serverWaits []time.Duration
	var waitsMu sync.Mutex
	p.Observe = func(ctx context.Context, e retry.Event) {
		switch {
		case e.Retry && e.WaitSetBy() == "server":
			at := time.Since(prov.startTime())
			waitsMu.Lock()
			serverWaits = append(serverWaits, at)
			waitsMu.Unlock()
		case e.Done:
			if end, ok := ctx.Value(jobEndKey{}).(*jobEnd); ok {
				end.reason, end.attempts = e.Reason, e.Attempt
			}
		}
	}
	client := retryhttp.NewClient(&http.Client{Transport: tr}, p)
	url := "http://" + ln.Addr().String() + "/notify"

	ctx, cancel := context.WithTimeout(context.Background(), liveBound)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		dead      []sim.DeadLetter
		finished  time.Duration
		wg        sync.WaitGroup
	)
	prov.begin()
	start := prov.startTime()
	for job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "job-" + strconv.Itoa(job)
			end := &jobEnd{}
			err := notify(context.WithValue(ctx, jobEndKey{}, end), client, url, key)
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			finished = max(finished, at)
			if err == nil {
				latencies = append(latencies, at)
				return
			}
			d := sim.DeadLetter{Job: job, At: at, Reason: err, Last: err}
			var re *retry.Error
			var resp *retry.ResponseError
			switch {
			case errors.As(err, &re):
				d.Attempts, d.Reason, d.Last = re.Attempts, re.Reason, re.Last
			case errors.As(err, &resp):
				// retryhttp hands back the last response when retrying
				// stops on one; Observe said why it stopped.
				d.Attempts, d.Reason, d.Last = end.attempts, end.reason, resp
			}
			dead = append(dead, d)
		}()
	}
	wg.Wait()
	r := prov.result(name, jobs, latencies, dead, finished)
	slices.Sort(serverWaits)
	r.ServerWaits = serverWaits
	return r, nil
}

// jobEnd is how a live job's call ended, as Observe saw it.
type jobEnd struct {
	reason   error
	attempts int
}

// jobEndKey is the context key of a live job's *jobEnd.
type jobEndKey struct{}

// notify sends one job through the retrying client: a POST carrying the
// job's idempotency key, which retryhttp therefore retries. It returns nil
// for a 2xx, a *retry.ResponseError when retrying ended on a status (the
// client hands back that last response), or the transport's *retry.Error.
func notify(ctx context.Context, client *http.Client, url, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drained so the connection is reused
	return retry.CheckResponse(resp)
}

// liveProvider is the loopback provider: down (hanging) until outage after
// begin, then Capacity requests per one-second window, 429 above that. It
// records every request's arrival. Safe for concurrent use.
type liveProvider struct {
	now      func() time.Time
	outage   time.Duration
	capacity int
	lost     float64
	release  chan struct{} // closed to free hanging handlers

	mu       sync.Mutex
	start    time.Time
	rng      *rand.Rand
	window   time.Duration // start of the current window, since start
	served   int           // requests served in it
	keys     map[string]bool
	attempts []sim.Attempt
	tries    map[string]int
	sent     int
	closed   bool
}

func newLiveProvider(now func() time.Time, outage time.Duration, capacity int, lost float64, seed uint64) *liveProvider {
	return &liveProvider{
		now: now, outage: outage, capacity: capacity, lost: lost,
		release: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(seed, 0x11fe)),
		window:  -1,
		keys:    map[string]bool{},
		tries:   map[string]int{},
	}
}

// begin starts the provider's clock: the outage runs from now.
func (p *liveProvider) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = p.now()
}

func (p *liveProvider) startTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start
}

// close frees every handler that is holding its reply.
func (p *liveProvider) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.release)
	}
}

func (p *liveProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "missing Idempotency-Key", http.StatusBadRequest)
		return
	}
	res, retryAfter := p.decide(key)
	switch res {
	case sim.Down, sim.LostReply:
		// No answer: hold the request until the client gives up.
		select {
		case <-r.Context().Done():
		case <-p.release:
		}
	case sim.Throttled:
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		http.Error(w, "too many requests", http.StatusTooManyRequests)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// decide records a request and says what becomes of it, and for a 429 the
// Retry-After: the time until the window resets, rounded up to whole seconds.
func (p *liveProvider) decide(key string) (sim.AttemptResult, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.now().Sub(p.start)
	p.tries[key]++
	res := p.fate(at, key)
	job, _ := strconv.Atoi(strings.TrimPrefix(key, "job-"))
	p.attempts = append(p.attempts, sim.Attempt{At: at, Job: job, N: p.tries[key], Result: res})
	if res == sim.Throttled {
		return res, (p.window + time.Second - at + time.Second - 1).Truncate(time.Second)
	}
	return res, 0
}

func (p *liveProvider) fate(at time.Duration, key string) sim.AttemptResult {
	if at < p.outage {
		return sim.Down
	}
	if w := at.Truncate(time.Second); w != p.window {
		p.window, p.served = w, 0
	}
	if p.served >= p.capacity {
		return sim.Throttled
	}
	p.served++
	res := sim.Sent
	if p.keys[key] {
		res = sim.Duplicate
	} else {
		p.keys[key] = true
		p.sent++
	}
	if p.rng.Float64() < p.lost {
		return sim.LostReply
	}
	return res
}

// result summarises a run from what the server saw and what the callers got.
func (p *liveProvider) result(name string, jobs int, latencies []time.Duration, dead []sim.DeadLetter, finished time.Duration) sim.DrillResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := sim.DrillResult{Name: name, Attempts: p.attempts, DeadLetters: dead, Sent: p.sent, Outage: p.outage}
	times := make([]time.Duration, len(p.attempts))
	for i, a := range p.attempts {
		times[i] = a.At
	}
	r.Summary = sim.Summarize(jobs, p.outage, times, latencies, len(dead), finished)
	r.Summary.Duplicates = r.Count(sim.Duplicate)
	return r
}
