// Command outage runs the seed's outage drill for real: 10,000 notification
// jobs go through River workers to a loopback provider that is down for its
// first 2,000 requests (10 s of the limiter's rate) and then throttles with
// 429 and Retry-After, under the policy of the seed (5 attempts,
// Exponential{500ms, 30s} full jitter, a 2 s attempt timeout, a 200/s
// limiter for every attempt, an idempotency key per notification that the
// provider deduplicates on), plugged into River with retryriver. It prints
// delivered, dead-lettered, cancelled and outcome-unknown jobs, attempts,
// the peak attempts per second, the drain time and what the provider sent
// per idempotency key, beside the same drill in virtual time, and writes an
// SVG chart of attempts per second with the outage marked. Progress goes to
// standard error.
//
// From the repository root:
//
//	cd retryriver/cmd/outage && go run .                      # SQLite in a temporary file
//	cd retryriver/cmd/outage && go run . -db "$DATABASE_URL"  # PostgreSQL: a schema of its own, dropped after
//	cd retryriver/cmd/outage && go run . -db "$DATABASE_URL" -procs 4 -workers 125 -limiter redis -kill-store 5s
//
// The last is the fleet drill: four worker processes on one queue, whose
// attempts share one limit of 200/s through Redis, and the Redis taken away
// for 5 s mid-drill. All processes call the one provider, which counts what
// it receives from all of them.
//
//	cd retryriver/cmd/outage && go run . -service 6s -procs 4 -workers 25 -limiter redis -delay 0-100ms -store-timeout 1s -drop 2s
//
// is the service fleet: no queue, four processes of 25 goroutines calling
// the provider through retryhttp as fast as one shared limit of 200/s (burst
// 10) lets them, for 6 s, the limiters reaching Redis through a loopback
// proxy that delays each request by 0 to 100 ms and drops the link for
// 2 s a third of the way in. It prints the most attempts admitted in any
// window of 100 ms and of 1 s against rate x window + burst, the share of
// attempts in a window above that, the rate achieved against the limit,
// and what the drop cost.
//
// Flags:
//
//	-db URL       PostgreSQL URL; empty (the default) means a SQLite file in a temporary folder
//	-scale s      run s times the jobs over s times every duration, at the same rates (0 < s <= 1; default 1)
//	-policy name  "retry" (retryriver, the default) or "river" (River's default retry policy, no limiter)
//	-crash        kill the worker process with SIGKILL once 30% of the jobs are final and some are running, and start a new one
//	-workers n    River workers (MaxWorkers) per process (default 500)
//	-svg file     where to write the chart (default outage.svg)
//	-seed n       seed of the provider's lost replies and of the virtual-time drill (default 1)
//	-keep         keep the database afterwards (its path or schema is printed)
//	-timeout d    give up if the jobs are not all final by then (default 30m)
//	-procs n      worker processes on the one queue (default 1), on PostgreSQL or on the one SQLite
//	              file (each process with its connection; WAL and a busy timeout let them take turns);
//	              -crash runs one
//	-limiter k    "local" (the default: a rate.NewLimiter(200, 10) in each process), "pg" (one limit
//	              shared by every process through the drill's PostgreSQL, retrypg.NewLimiter; needs -db)
//	              or "redis" (through Redis, retryredis.NewLimiter)
//	-redis URL    the Redis of -limiter redis (default $RETRY_REDIS_URL); empty, or with -kill-store, a
//	              redis-server of the drill's own on a loopback port
//	-kill-store d take the shared limiter's store away for d once 30% of the jobs are final: Redis is
//	              killed with SIGKILL and started again on the same port (losing its schedules); for
//	              PostgreSQL, which also holds River's queue, the limiters' own path to it is cut (they
//	              connect through a loopback proxy of the drill's, which closes their connections and
//	              refuses new ones), so that the jobs' database stays up
//	-fallback s   the shared limiter's behaviour while its store is down: 0 (the default) fails closed,
//	              s in (0, 1] books on a local limiter at s times the rate in each process
//	-store-timeout d  the shared limiter's timeout per round trip (fleet.Options.Timeout; 0, the
//	              default, is fleet's 100ms)
//	-delay lo-hi  the shared limiters reach their store through a loopback proxy that delays each
//	              request to it by a draw from [lo, hi] (uniform, seeded by -seed), e.g. 0-100ms
//	-back-delay lo-hi  the same proxy delays each reply from the store by a draw from [lo, hi]
//	              (uniform, seeded by -seed, drawn apart from -delay's), e.g. 0-100ms; with -delay
//	              too, each round trip is delayed twice
//	-drop d       drop the limiters' link to their store (through that proxy: connections closed, new
//	              ones refused) for d, once 30% of the jobs are final, or a third of the way into -service;
//	              the store itself stays up
//	-service d    run the service fleet for d instead of the River drill: -procs processes of -workers
//	              goroutines each, on a shared limiter (-limiter pg or redis)
//	-rate r, -burst b  the service fleet's limit (default the drill's, 200/s with a burst of 10)
//
// It exits with status 1 if any job is left behind or any figure fails its
// check: every job delivered, dead-lettered or cancelled; each
// notification sent at most once (the provider counts what it sends per
// idempotency key); every delivered job's notification sent; and, with the
// retryriver policy, every job that met the outage, and every job the
// crash drill's killed process was running, marked outcome-unknown or
// found by the reconciliation query. What the limiter allows (the rate and
// the burst over any sliding second, for one process or the whole fleet)
// and what the provider saw while the store was away are printed, not
// checked: they move with the machine's load.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain(os.Args[1:]))
	}
	if spec := os.Getenv(serviceEnv); spec != "" {
		os.Exit(serviceMain(spec))
	}
	// On SIGINT or SIGTERM the drill stops its worker process and removes
	// its database before it exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "db", "", "PostgreSQL URL; empty means a SQLite file in a temporary folder")
	fs.Float64Var(&c.scale, "scale", 1, "run `s` times the jobs over s times every duration, at the same rates (0 < s <= 1)")
	policy := fs.String("policy", "retry", `"retry" (retryriver) or "river" (River's default retry policy, no limiter)`)
	fs.BoolVar(&c.crash, "crash", false, "kill the worker process with SIGKILL once 30% of the jobs are final and some are running, and start a new one")
	fs.IntVar(&c.workers, "workers", 500, "River workers (MaxWorkers) per process")
	fs.IntVar(&c.procs, "procs", 1, "worker `processes` on the one queue")
	fs.StringVar(&c.limiter, "limiter", localLimiter, `"local" (a rate.Limiter in each process), "pg" (one limit shared through the drill's PostgreSQL) or "redis" (through Redis)`)
	fs.StringVar(&c.redisURL, "redis", os.Getenv("RETRY_REDIS_URL"), "the Redis `URL` of -limiter redis; empty: a redis-server of the drill's own")
	fs.DurationVar(&c.killStore, "kill-store", 0, "take the shared limiter's store away for `d` once 30% of the jobs are final, then bring it back")
	fs.Float64Var(&c.fallback, "fallback", 0, "the shared limiter's fallback while its store is down: 0 fails closed, a `share` s in (0, 1] books locally at s times the rate")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 0, "the shared limiter's timeout per round trip to its store (fleet.Options.Timeout); 0: fleet's default, 100ms")
	delay := fs.String("delay", "", "delay each request from the limiters to their store by a draw from `lo-hi` (0-100ms), through a loopback proxy")
	backDelay := fs.String("back-delay", "", "delay each reply from the limiters' store to them by a draw from `lo-hi` (0-100ms), through the same proxy as -delay")
	fs.DurationVar(&c.drop, "drop", 0, "drop the limiters' link to their store for `d` (connections closed, new ones refused) once 30% of the jobs are final, or a third of the way into -service")
	fs.DurationVar(&c.service, "service", 0, "run the service fleet for `d` instead of the River drill: -procs processes of -workers goroutines calling the provider as fast as one shared limit lets them")
	fs.Float64Var(&c.rate, "rate", 0, "the service fleet's shared limit, attempts per second (0: the drill's 200)")
	fs.IntVar(&c.burst, "burst", 0, "the service fleet's burst (0: the drill's 10)")
	fs.StringVar(&c.svg, "svg", "outage.svg", "where to write the chart")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the provider's lost replies and of the virtual-time drill")
	fs.BoolVar(&c.keep, "keep", false, "keep the database afterwards")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up if the jobs are not all final by then")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.link.minDelay, c.link.maxDelay, err = parseDelay("-delay", *delay); err != nil {
		return c, err
	}
	if c.link.minReplyDelay, c.link.maxReplyDelay, err = parseDelay("-back-delay", *backDelay); err != nil {
		return c, err
	}
	c.link.seed = c.seed
	switch *policy {
	case "retry":
	case "river":
		c.riverDefault = true
	default:
		return c, fmt.Errorf("outage: -policy must be retry or river, not %q", *policy)
	}
	if c.workers < 1 {
		return c, fmt.Errorf("outage: -workers must be at least 1")
	}
	if err := c.checkFleet(); err != nil {
		return c, err
	}
	if _, err := paramsFor(c.scale); err != nil {
		return c, err
	}
	return c, nil
}

// checkFleet checks the flags of the fleet: processes, limiter, store.
func (c config) checkFleet() error {
	shared := c.limiter == pgLimiter || c.limiter == redisLimiter
	switch {
	case c.limiter != localLimiter && !shared:
		return fmt.Errorf("outage: -limiter must be local, pg or redis, not %q", c.limiter)
	case c.procs < 1:
		return fmt.Errorf("outage: -procs must be at least 1")
	case c.procs > 1 && c.crash:
		return fmt.Errorf("outage: -crash runs one worker process (the jobs still running once it is killed are the ones it ran), not -procs %d", c.procs)
	case c.limiter == pgLimiter && c.url == "":
		return fmt.Errorf("outage: -limiter pg shares the limit through the drill's PostgreSQL: it needs -db")
	case shared && c.riverDefault:
		return fmt.Errorf("outage: -policy river has no limiter: -limiter %s would change nothing", c.limiter)
	case c.killStore < 0:
		return fmt.Errorf("outage: -kill-store must not be negative")
	case c.killStore > 0 && !shared:
		return fmt.Errorf("outage: -kill-store takes a shared limiter's store away: it needs -limiter pg or redis")
	case !(c.fallback >= 0 && c.fallback <= 1):
		return fmt.Errorf("outage: -fallback must be in [0, 1], not %v", c.fallback)
	case c.fallback > 0 && !shared:
		return fmt.Errorf("outage: -fallback is a shared limiter's: it needs -limiter pg or redis")
	case c.storeTimeout < 0:
		return fmt.Errorf("outage: -store-timeout must not be negative")
	case c.storeTimeout > 0 && !shared:
		return fmt.Errorf("outage: -store-timeout is a shared limiter's: it needs -limiter pg or redis")
	case c.link.maxDelay > 0 && !shared:
		return fmt.Errorf("outage: -delay slows the link to a shared limiter's store: it needs -limiter pg or redis")
	case c.link.maxReplyDelay > 0 && !shared:
		return fmt.Errorf("outage: -back-delay slows the link from a shared limiter's store: it needs -limiter pg or redis")
	case c.drop < 0:
		return fmt.Errorf("outage: -drop must not be negative")
	case c.drop > 0 && !shared:
		return fmt.Errorf("outage: -drop cuts the link to a shared limiter's store: it needs -limiter pg or redis")
	case c.drop > 0 && c.killStore > 0:
		return fmt.Errorf("outage: -drop cuts the link, -kill-store takes the store away: one or the other")
	case c.service < 0:
		return fmt.Errorf("outage: -service must not be negative")
	case c.service > 0 && !shared:
		return fmt.Errorf("outage: -service measures a shared limit: it needs -limiter pg or redis")
	case !(c.rate >= 0) || math.IsInf(c.rate, 0) || c.burst < 0:
		return fmt.Errorf("outage: -rate and -burst must be positive, or 0 for the drill's")
	case (c.rate > 0 || c.burst > 0) && c.service == 0:
		return fmt.Errorf("outage: -rate and -burst are the service fleet's: they need -service")
	case c.service > 0 && (c.crash || c.killStore > 0 || c.riverDefault):
		return fmt.Errorf("outage: -service runs no River jobs: -crash, -kill-store and -policy river are the River drill's")
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if c.service > 0 {
		r, err := serviceDrill(ctx, c, stderr)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		reportService(stdout, c, r)
		return 0
	}
	r, err := drill(ctx, c, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var m *modelResult
	if !c.riverDefault && c.killStore == 0 && (r.procs == 1 || r.limiter.shared()) {
		// The virtual-time drill has one limiter of the rate: one process's,
		// or the fleet's shared one while its store is up.
		mr := model(r.p, c.seed)
		m = &mr
	}
	report(stdout, c, r, m)
	bin := max(100*time.Millisecond, time.Duration(float64(time.Second)*c.scale))
	ch := chart{
		title:    fmt.Sprintf("Outage drill on River (%s, %s): attempts per second at the provider", r.db, policyName(c)),
		arrivals: r.provider.arrivals, bin: bin, outage: r.provider.upAt, capacity: float64(r.p.capacity), drain: r.drain, crashAt: r.crashAt,
		storeDown: r.storeDown, storeUp: r.storeUp,
	}
	if !c.riverDefault {
		ch.limit, ch.limitLabel = r.p.limit, fmt.Sprintf("limiter %g/s", r.p.limit)
	}
	if f := fleetName(r); f != "" && !c.riverDefault {
		ch.title = fmt.Sprintf("Fleet drill on River (%s, %s): attempts/s at the provider", r.db, f)
		if !r.limiter.shared() {
			ch.limit, ch.limitLabel = float64(r.procs)*r.p.limit, fmt.Sprintf("%d limiters of %g/s", r.procs, r.p.limit)
		}
	}
	if err := writeChart(c.svg, ch); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "chart: %s\n", c.svg)
	if problems := check(r); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "outage: FAILED:", p)
		}
		return 1
	}
	return 0
}

func writeChart(path string, ch chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ch.write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fleetName names the fleet in the chart's title, "" for one process with
// its own limiter.
func fleetName(r *result) string {
	if r.procs == 1 && !r.limiter.shared() {
		return ""
	}
	name := map[string]string{localLimiter: "a limiter each", pgLimiter: "one limit on PostgreSQL", redisLimiter: "one limit on Redis"}[r.limiter.kind]
	return fmt.Sprintf("%d processes, %s", r.procs, name)
}

func policyName(c config) string {
	if c.riverDefault {
		return "River's default retry policy"
	}
	return "retryriver policy"
}

// check returns what is wrong with a result, from what the database and
// the provider recorded, whatever the machine's speed: a job left behind; a
// notification the provider sent more than once (effects per idempotency
// key, counted where the provider sends), or for a key no job has; a
// delivered job whose notification was never sent; and, under the
// retryriver middleware, an attempt that met the outage (it timed out, so
// it may have done work) whose job is not marked outcome-unknown, or a job
// the crash drill's killed process was running that is neither marked nor
// selected by the reconciliation query.
func check(r *result) []string {
	var out []string
	f := r.final
	if f.final() != r.p.jobs || f.other != 0 {
		out = append(out, fmt.Sprintf("%d jobs accounted for of %d, %d left", f.final(), r.p.jobs, f.other))
	}
	byKey := make(map[string]outcome, len(r.jobs))
	for _, o := range r.jobs {
		byKey[o.key] = o
	}
	if most, repeated := r.provider.mostSent(); repeated > 0 {
		out = append(out, fmt.Sprintf("the provider sent %d notifications more than once (one of them %d times)", repeated, most))
	}
	stray := 0
	for key := range r.provider.effects {
		if _, ok := byKey[key]; !ok {
			stray++
		}
	}
	if stray > 0 {
		out = append(out, fmt.Sprintf("the provider sent %d notifications for keys no job has", stray))
	}
	unsent, unmarked := 0, 0
	for _, o := range r.jobs {
		if o.state == "completed" && r.provider.effects[o.key] == 0 {
			unsent++
		}
		if r.marks && r.provider.down[o.key] > 0 && o.unknown == 0 {
			unmarked++
		}
	}
	if unsent > 0 {
		out = append(out, fmt.Sprintf("%d jobs delivered whose notification was never sent", unsent))
	}
	if unmarked > 0 {
		out = append(out, fmt.Sprintf("%d jobs met the outage (an attempt timed out) but are not marked outcome-unknown", unmarked))
	}
	if r.marks {
		ids := make(map[int64]outcome, len(r.jobs))
		for _, o := range r.jobs {
			ids[o.id] = o
		}
		lost := 0
		for _, id := range r.killed {
			if o := ids[id]; o.unknown == 0 && !o.reconcile {
				lost++
			}
		}
		if lost > 0 {
			out = append(out, fmt.Sprintf("%d of the %d jobs running when the worker was killed are neither marked outcome-unknown nor reconciled", lost, len(r.killed)))
		}
	}
	return out
}

func report(w io.Writer, c config, r *result, m *modelResult) {
	p := r.p
	fmt.Fprintf(w, "OUTAGE DRILL on River, real time: %d notification jobs on %s (scale %g)\n", p.jobs, r.db, p.scale)
	fmt.Fprintf(w, "provider: down for its first %d requests (%v at the limiter's rate; it accepts them and never answers: each attempt times out),\n", p.outage, time.Duration(float64(p.outage)/p.limit*float64(time.Second)))
	fmt.Fprintf(w, "  then serves %d requests per %v;\n", p.capacity, p.window)
	fmt.Fprintf(w, "  above that 429 with Retry-After and retry-after-ms until the window resets; %.0f%% of served replies are lost;\n", 100*p.lostReplies)
	fmt.Fprintf(w, "  it deduplicates on each notification's Idempotency-Key\n")
	if c.riverDefault {
		fmt.Fprintf(w, "policy: River's default retry policy (attempt^4 s, +-10%%), max_attempts %d, job timeout %v, no limiter, no Retry-After\n", p.maxAttempts, p.attemptTimeout)
	} else {
		fmt.Fprintf(w, "policy: retryriver with retry.Policy{MaxAttempts: %d, Exponential{Base: %v, Cap: %v} full jitter, AttemptTimeout: %v,\n", p.maxAttempts, p.base, p.cap, p.attemptTimeout)
		fmt.Fprintf(w, "  Limiter: rate.NewLimiter(%g, %d) for every attempt}\n", p.limit, p.burst)
	}
	if !c.riverDefault && (r.procs > 1 || r.limiter.shared()) {
		fmt.Fprintf(w, "fleet: %d worker processes on one queue; limiter: %s\n", r.procs, r.limiter.describe(p, r.procs))
		if c.link.delayed() || c.drop > 0 || c.storeTimeout > 0 {
			fmt.Fprintf(w, "  link to the store: %s; store timeout %v\n", c.link.describe(), cmp.Or(c.storeTimeout, 100*time.Millisecond))
		}
	}
	fmt.Fprintf(w, "workers: %d River workers per process", c.workers)
	if r.crashAt > 0 {
		fmt.Fprintf(w, "; the worker process was killed (SIGKILL) at %.1f s, with %d jobs final and %d running, and a new one started", r.crashAt.Seconds(), r.crashFinal, len(r.killed))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	col := func(name string, real any, virtual any) {
		if m == nil {
			fmt.Fprintf(tw, "%s\t%v\t\n", name, real)
			return
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t\n", name, real, virtual)
	}
	if m == nil {
		fmt.Fprintf(tw, "\tthis run\t\n")
	} else {
		fmt.Fprintf(tw, "\tthis run\tvirtual time (retry.Next, same parameters)\t\n")
		m = &modelResult{delivered: m.delivered, dead: m.dead, attempts: m.attempts, duplicates: m.duplicates, unknownJobs: m.unknownJobs, peak: m.peak, peakClock: m.peakClock, drain: m.drain}
	}
	f := r.final
	v := func(x int) any {
		if m == nil {
			return nil
		}
		return x
	}
	col("delivered", f.completed, v(m.get(func(m *modelResult) int { return m.delivered })))
	col("dead-lettered (discarded)", f.discarded, v(m.get(func(m *modelResult) int { return m.dead })))
	col("cancelled", f.cancelled, v(0))
	unknown := "not marked (no retryriver middleware)"
	if !c.riverDefault {
		jobs, attempts := r.unknown()
		unknown = fmt.Sprintf("%d jobs (%d attempts); %d not delivered (reconciliation query)", jobs, attempts, r.reconciled())
	}
	col("outcome-unknown", unknown, v(m.get(func(m *modelResult) int { return m.unknownJobs })))
	col("attempts", fmt.Sprintf("%d (provider saw %d)", f.attempts, len(r.provider.arrivals)), v(m.get(func(m *modelResult) int { return m.attempts })))
	col("peak attempts per second", r.peak, v(m.get(func(m *modelResult) int { return m.peak })))
	col("peak attempts in a clock second", peakPerClockSecond(r.provider.arrivals), v(m.get(func(m *modelResult) int { return m.peakClock })))
	drainModel := any(nil)
	if m != nil {
		drainModel = fmt.Sprintf("%.1f s", m.drain.Seconds())
	}
	col("drain time", fmt.Sprintf("%.1f s", r.drain.Seconds()), drainModel)
	col("duplicates absorbed by the key", r.provider.dups, v(m.get(func(m *modelResult) int { return m.duplicates })))
	tw.Flush()
	most, repeated := r.provider.mostSent()
	mostIn, repeatedIn := r.provider.mostReceived()
	fmt.Fprintf(w, "\nprovider: received %d requests for %d keys (%d keys more than once, at most %d times);\n",
		len(r.provider.arrivals), len(r.provider.received), repeatedIn, mostIn)
	fmt.Fprintf(w, "  %d notifications sent, %d of them more than once (at most %d per idempotency key);\n", r.provider.sent(), repeated, most)
	fmt.Fprintf(w, "  %d attempts met the outage, %d throttled (429), %d replies lost\n", r.provider.metOutage(), r.provider.throttled, r.provider.lost)
	if !c.riverDefault {
		reportLimit(w, r)
	}
	if r.loadStart != "" {
		fmt.Fprintf(w, "machine: load average %s at the start, %s at the end (1, 5 and 15 minutes; %d CPUs)\n", r.loadStart, loadAverage(), runtime.NumCPU())
	}
	fmt.Fprintf(w, "accounted for: %d of %d jobs (delivered, dead-lettered or cancelled), %d left behind\n", f.final(), p.jobs, p.jobs-f.final())
	fmt.Fprintf(w, "(peak: most attempts reaching the provider in any 1-second sliding window, or in one of the seconds counted from its first request;\n")
	fmt.Fprintf(w, " drain: from the outage's start until no job was left;\n")
	fmt.Fprintf(w, " outcome-unknown: jobs with an attempt that timed out, was cut off or whose worker died, marked in metadata %q)\n", "retry_outcome_unknown")
}

// get reads a figure of the model, 0 when there is none.
func (m *modelResult) get(f func(*modelResult) int) int {
	if m == nil {
		return 0
	}
	return f(m)
}

// reportLimit prints what the limiter allows the fleet over any sliding
// second and what the provider saw, and, when the limit's store was taken
// away, what the provider saw meanwhile against what the fallback allows.
func reportLimit(w io.Writer, r *result) {
	p, lc, n := r.p, r.limiter, r.procs
	bound := p.limit + float64(p.burst)
	if lc.shared() {
		fmt.Fprintf(w, "limit: the fleet's attempts over any sliding second are at most the rate + burst = %g, and a burst more (%g)\n", bound, bound+float64(p.burst))
		fmt.Fprintf(w, "  when attempts wake late (a booking's Slack, %v: a later one books again); the provider saw at most %d\n", slack(p), r.peak)
	} else {
		fmt.Fprintf(w, "limit: each process's attempts over any sliding second are at most the rate + burst = %g (and a burst more when they wake late),\n", bound)
		fmt.Fprintf(w, "  so %d processes' up to %g; the provider saw at most %d\n", n, float64(n)*bound, r.peak)
	}
	if lc.shared() && len(r.provider.admitted) > 0 {
		fmt.Fprintf(w, "  admitted, on the limiters' own clocks (%d attempts):\n", len(r.provider.admitted))
		reportWindows(w, r.provider.admitted, p.limit, p.burst)
	}
	if r.storeUp == 0 {
		return
	}
	down := window(r.provider.arrivals, r.storeDown, r.storeUp)
	late := window(r.provider.arrivals, r.storeDown+storeGrace, r.storeUp)
	fmt.Fprintf(w, "store: the limiter's store was taken away from %.1f s to %.1f s (%d jobs final); meanwhile the provider received %d attempts,\n",
		r.storeDown.Seconds(), r.storeUp.Seconds(), r.storeFinal, len(down))
	fmt.Fprintf(w, "  %d of them after its first %v, at most %d in any sliding second; by second from when it went: %v", len(late), storeGrace, peakPerSecond(down),
		bySecond(down, r.storeDown, r.storeUp))
	if lc.fallback == 0 {
		fmt.Fprintf(w, ";\n  failing closed, the limiter books none: what came had been booked before\n")
	} else {
		fb := math.Ceil(float64(p.burst) * lc.fallback)
		fmt.Fprintf(w, ";\n  falling back to %g of the rate, each process allows %g a second and a burst of %g: %d processes %g and %g\n",
			lc.fallback, p.limit*lc.fallback, fb, n, float64(n)*p.limit*lc.fallback, float64(n)*fb)
	}
}

// storeGrace is how long after its store is taken away a limiter may still
// start attempts it booked before: the slots a process holds reach at most
// a batch (50 ms of the rate) and the tolerance (the burst's time) ahead,
// and an attempt reaches the provider a moment after its slot.
const storeGrace = 500 * time.Millisecond

// slack is the Slack of the drill's limiters' bookings: the time the rate
// takes to refill the burst.
func slack(p params) time.Duration {
	return time.Duration(float64(p.burst) / p.limit * float64(time.Second))
}

// loadAverage returns the machine's load averages over 1, 5 and 15 minutes,
// as the kernel gives them, or "" where it does not: figures measured on a
// shared machine mean little without them.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}
