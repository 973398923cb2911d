package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// config is the command line of the drill.
type config struct {
	url          string // PostgreSQL URL; empty means a SQLite file
	scale        float64
	riverDefault bool
	crash        bool
	workers      int
	procs        int           // worker processes on the one queue; 0 means 1
	limiter      string        // localLimiter, pgLimiter or redisLimiter; "" means local
	redisURL     string        // the Redis of -limiter redis; empty: one of the drill's own
	killStore    time.Duration // take the shared limit's store away this long, mid-drill; 0: never
	fallback     float64       // fleet.Options.Fallback of a shared limiter
	storeTimeout time.Duration // fleet.Options.Timeout of a shared limiter; 0: fleet's default
	link         linkConfig    // the limiters' network to their store (-delay, -back-delay)
	drop         time.Duration // drop the limiters' link to their store this long, mid-drill (or mid-run); 0: never
	service      time.Duration // run the service fleet for this long instead of the River drill; 0: the River drill
	rate         float64       // the service fleet's limit; 0: the drill's, 200/s
	burst        int           // the service fleet's burst; 0: the drill's, 10
	svg          string
	seed         uint64
	keep         bool
	timeout      time.Duration // give up if the jobs are not all final by then; 0: never
	// stall gives up once no job has become final and the provider has had
	// no request for this long (0: never): a bound on a drill that is stuck,
	// not on one that runs slowly on a loaded machine.
	stall time.Duration
}

// away returns how long the drill takes the shared limit's store, or the
// limiters' link to it, away; 0: never.
func (c config) away() time.Duration { return c.killStore + c.drop }

// result is what one run of the drill measured.
type result struct {
	db         string
	p          params
	marks      bool // the retryriver middleware ran the jobs, so attempts are marked
	final      counts
	jobs       []outcome
	provider   stats
	peak       int
	drain      time.Duration
	crashAt    time.Duration // 0 without a crash
	crashFinal int           // jobs final when the worker was killed
	killed     []int64       // the jobs it was running
	procs      int
	limiter    limiterConfig
	// When the limit's store was taken away and brought back, on the
	// provider's clock; zero without -kill-store.
	storeDown, storeUp time.Duration
	storeFinal         int    // jobs final when it was taken away
	loadStart          string // the machine's load averages when the drill began
}

// unknown returns the jobs marked outcome-unknown and their marked attempts.
func (r *result) unknown() (jobs, attempts int) {
	for _, o := range r.jobs {
		if o.unknown > 0 {
			jobs++
			attempts += o.unknown
		}
	}
	return jobs, attempts
}

// reconciled returns the jobs the reconciliation query selects.
func (r *result) reconciled() int {
	n := 0
	for _, o := range r.jobs {
		if o.reconcile {
			n++
		}
	}
	return n
}

// drill runs the outage once: it makes the database and the provider,
// queues the jobs, starts the workers (in this process, or in worker
// processes for the crash drill and a fleet of several), waits until every
// job is delivered, dead-lettered or cancelled, and measures. With
// -kill-store it takes the shared limit's store away once 30% of the jobs
// are final, for c.killStore, and brings it back; with -drop it drops the
// limiters' link to it instead, for c.drop.
func drill(ctx context.Context, c config, stderr io.Writer) (*result, error) {
	p, err := paramsFor(c.scale)
	if err != nil {
		return nil, err
	}
	procs := max(c.procs, 1)
	s, err := openStore(ctx, c.url, c.keep)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	if c.keep {
		fmt.Fprintf(stderr, "outage: keeping the database: %s %s\n", s.dsn, s.schema)
	}
	lc := limiterConfig{kind: cmp.Or(c.limiter, localLimiter), fallback: c.fallback, timeout: c.storeTimeout}
	var ls *limitStore
	away := c.away()
	if lc.shared() {
		link := c.link
		link.proxied = c.drop > 0
		if ls, err = openLimitStore(ctx, lc.kind, s.dsn, c.redisURL, c.killStore > 0, link); err != nil {
			return nil, err
		}
		defer ls.close()
		if c.drop > 0 {
			// The store stays up; its link goes.
			ls.kill = func() error { ls.link.Cut(); return nil }
			ls.start = ls.link.Restore
		}
		lc.url, lc.name = ls.url, "outage-"+rand.Text()[:12]
		if lc.kind == pgLimiter {
			lc.schema = s.schema // the limiter's table is dropped with the drill's schema
		}
	}
	pr, err := newProvider(p, c.seed, true)
	if err != nil {
		return nil, err
	}
	defer pr.close()
	fmt.Fprintf(stderr, "outage: queueing %d jobs in %s\n", p.jobs, s.name())
	if err := s.insert(ctx, p.jobs, p.maxAttempts); err != nil {
		return nil, err
	}
	wc := workerConfig{postgres: s.postgres, dsn: s.dsn, schema: s.schema, providerURL: pr.url,
		scale: c.scale, riverDefault: c.riverDefault, workers: c.workers, procs: procs, limiter: lc}

	r := &result{db: s.name(), p: p, marks: !c.riverDefault, procs: procs, limiter: lc, loadStart: loadAverage()}
	launched := time.Now()
	separate := c.crash || procs > 1
	stops := make([]func(kill bool), 0, procs)
	stopAll := func() {
		var wg sync.WaitGroup
		for _, stop := range stops {
			wg.Go(func() { stop(false) })
		}
		wg.Wait()
	}
	defer func() { stopAll() }()
	for range procs {
		stop, err := startWorker(ctx, wc, separate, stderr)
		if err != nil {
			return nil, err
		}
		stops = append(stops, stop)
	}

	crashed := !c.crash
	lastReport := launched
	var deadline time.Time
	if c.timeout > 0 {
		deadline = launched.Add(c.timeout)
	}
	// storeBack says when the limit's store came back, once it was taken
	// away, on the provider's clock.
	var storeBack chan storeReturn
	lastFinal, lastArrivals, progressed := -1, -1, launched
	for {
		cnt, err := s.counts(ctx)
		if err != nil {
			return nil, fmt.Errorf("outage: reading the jobs: %w", err)
		}
		now := time.Now()
		// Times are measured from the provider's first request, when the
		// outage began.
		start := pr.started()
		if start.IsZero() {
			start = now
		}
		if cnt.final() == p.jobs {
			r.drain = now.Sub(start)
			r.final = cnt
			break
		}
		if !crashed && cnt.final() >= p.jobs*3/10 && cnt.running > 0 {
			// Kill the worker process in the middle of the drill, with
			// jobs in flight, and start a new one. The jobs still running
			// once it is dead are the ones it was running: no one else can
			// end them but River's rescuer.
			crashed = true
			r.crashAt, r.crashFinal = now.Sub(start), cnt.final()
			stops[0](true)
			if r.killed, err = s.running(ctx); err != nil {
				return nil, fmt.Errorf("outage: reading the jobs: %w", err)
			}
			fmt.Fprintf(stderr, "outage: %5.1fs  killed the worker process (SIGKILL) with %d jobs running; starting a new one\n",
				r.crashAt.Seconds(), len(r.killed))
			if stops[0], err = startWorker(ctx, wc, true, stderr); err != nil {
				return nil, err
			}
		}
		if away > 0 && storeBack == nil && cnt.final() >= p.jobs*3/10 {
			r.storeDown, storeBack = takeAway(ctx, ls, away, start)
			r.storeFinal = cnt.final()
			fmt.Fprintf(stderr, "outage: %5.1fs  took the limiter's store (%s) away for %v, with %d jobs final\n",
				r.storeDown.Seconds(), lc.kind, away, cnt.final())
		}
		st := pr.stats()
		if cnt.final() != lastFinal || len(st.arrivals) != lastArrivals {
			lastFinal, lastArrivals, progressed = cnt.final(), len(st.arrivals), now
		}
		if now.Sub(lastReport) >= time.Second {
			lastReport = now
			fmt.Fprintf(stderr, "outage: %5.1fs  delivered %5d  dead-lettered %4d  cancelled %4d  waiting %5d  attempts %6d (last second %d)\n",
				now.Sub(start).Seconds(), cnt.completed, cnt.discarded, cnt.cancelled, cnt.other, len(st.arrivals), lastSecond(st.arrivals, now.Sub(start)))
		}
		if !deadline.IsZero() && now.After(deadline) {
			return nil, fmt.Errorf("outage: %d of %d jobs still not final after %v: %+v", p.jobs-cnt.final(), p.jobs, c.timeout, cnt)
		}
		if c.stall > 0 && now.Sub(progressed) > c.stall+away {
			return nil, fmt.Errorf("outage: stuck: for %v no job became final and the provider had no request; %d of %d jobs not final: %+v",
				c.stall, p.jobs-cnt.final(), p.jobs, cnt)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if storeBack != nil {
		// The jobs may all be final before the store is back (with a
		// fallback): the outage still lasts what was asked.
		back := <-storeBack
		if back.err != nil {
			return nil, back.err
		}
		r.storeUp = back.at
		fmt.Fprintf(stderr, "outage: %5.1fs  brought the limiter's store back\n", r.storeUp.Seconds())
	}
	if r.jobs, err = s.outcomes(ctx); err != nil {
		return nil, err
	}
	r.provider = pr.stats()
	r.peak = peakPerSecond(r.provider.arrivals)
	return r, nil
}

// storeReturn is when the limit's store came back, or why it did not.
type storeReturn struct {
	at  time.Duration
	err error
}

// takeAway takes ls away now, and brings it back after d (or when ctx
// ends), then says when, on the clock that starts at start. It returns when
// the store went, read before the wait for its return starts, so that the
// outage measured is never shorter than d.
func takeAway(ctx context.Context, ls *limitStore, d time.Duration, start time.Time) (time.Duration, chan storeReturn) {
	back := make(chan storeReturn, 1)
	err := ls.kill()
	down := time.Since(start)
	if err != nil {
		back <- storeReturn{err: err}
		return down, back
	}
	go func() {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		at := time.Since(start)
		back <- storeReturn{at: at, err: ls.start()}
	}()
	return down, back
}

// lastSecond counts the arrivals in the second before now.
func lastSecond(sorted []time.Duration, now time.Duration) int {
	n := 0
	for i := len(sorted) - 1; i >= 0 && sorted[i] > now-time.Second; i-- {
		n++
	}
	return n
}

// startWorker starts the drill's River workers: in this process, or in a
// new process of this program when separate (the crash drill, whose worker
// must be killable). The returned func stops them: kill ends a worker
// process at once with SIGKILL, as a crash would.
func startWorker(ctx context.Context, wc workerConfig, separate bool, stderr io.Writer) (stop func(kill bool), err error) {
	if !separate {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- work(wctx, wc) }()
		return func(bool) {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintln(stderr, "outage: worker:", err)
			}
		}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, wc.args()...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("outage: starting a worker process: %w", err)
	}
	var stopped bool
	return func(kill bool) {
		if stopped {
			return
		}
		stopped = true
		if kill {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				fmt.Fprintln(stderr, "outage: worker process:", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}, nil
}
