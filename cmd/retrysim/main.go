// Command retrysim shows, with the retry package's own strategies and
// decision step, why jitter, retry budgets, rate limiters and hedging
// matter. Its README (cmd/retrysim/README.md) has the figures.
//
// It runs three studies in virtual time and writes their charts as SVG:
//
//   - contention: a reproduction of the simulator behind Marc Brooker's
//     "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015): N
//     clients race to update one row under optimistic concurrency control,
//     backing off after each conflict. It reports the write calls and the
//     time until every client has succeeded, for each backoff strategy, next
//     to the published figures, and then says in plain words what they show
//     (among other things, that "no backoff" finishes first only because the
//     model's server has no capacity limit).
//   - drill: 10,000 notification jobs meet a provider outage. A scheduler
//     persists each job's next attempt time from retry.Next instead of
//     sleeping, paces attempts with a shared limiter, and dead-letters the
//     jobs it gives up on. It compares the policy as given with the same
//     policy without jitter, without the limiter, without either, with a
//     retry budget, with an adaptive.Limiter that is given no rate, and,
//     without the limiter, against a provider that answers 503 with
//     Retry-After while it is down; and River's default retry policy. After
//     its tables it says in one sentence per variant what that variant
//     shows.
//   - hedging: calls against a server whose latency has a heavy tail (98%
//     about 5 ms, 2% about 1 s), at half its capacity and overloaded, with
//     no hedging, hedging at the p95, adaptive hedging, each with and
//     without a budget, and retrying on a timeout: p50, p99, p99.9, the
//     extra load and the server's work, modelled by the core's hedging rules
//     (internal/sim/hedging/model.go), and what they show.
//
// With -live it runs short checks for real instead (or as well, with
// -study): the drill, with goroutines sending through retryhttp to a
// loopback HTTP server that first hangs, then throttles with 429 and
// Retry-After; hedging through retryhttp against a loopback server with
// the heavy tail, over HTTP/2 and HTTP/1.1; and the ingestion pipeline,
// writers through retryhttp draining a backlog into a loopback storage
// that serves C writes at once and queues the rest.
//
// Usage:
//
//	go run ./cmd/retrysim [-study all|contention|drill|hedging] [-quick] [-live]
//	                      [-clients 10,20,...] [-episodes 100] [-jobs 10000]
//	                      [-calls 50000] [-seed 1] [-workers N] [-out dir]
//
// Tables go to standard output, progress to standard error, and the charts to
// the folder given by -out (a new temporary folder by default), whose name is
// printed at the end. -h prints the flags and exits with status 0; a bad flag
// exits with status 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/sim/hedging"
	"github.com/seed93a044d1/retry/internal/sim/ingest"
)

func main() {
	os.Exit(exitCode(run(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode returns the command's exit status for run's error, reporting the
// error on stderr: 0 for none and for -h (the help asked for was printed),
// 2 otherwise.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintln(stderr, "retrysim:", err)
		return 2
	}
}

// config is the command line.
type config struct {
	// study is all, contention, drill, hedging, or none: -live alone runs
	// only the live checks.
	study     string
	clients   []int
	episodes  int
	seed      uint64
	quick     bool
	live      bool
	out       string
	jobs      int
	calls     int
	writes    int
	workers   int
	liveJobs  int // not a flag: the live drill's size, smaller in tests
	liveCalls int // not a flag: the live hedging check's calls, fewer in tests
	// liveIngest is not a flag: the live ingestion check's size, smaller
	// in tests.
	liveIngest liveIngestSize
}

// Defaults, and what -quick changes them to.
var (
	defaultClients = []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190}
	quickClients   = []int{10, 40, 70, 100, 130, 160, 190}
)

// defaultEpisodes is the number of episodes averaged per point. Episodes are
// seeded one by one, so -quick's points are the default sweep's at the same
// client counts: it only runs fewer of them.
const defaultEpisodes = 100

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("retrysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: retrysim [flags]\n\nRuns the contention study, the outage drill and the hedging study in virtual\ntime, prints their tables and what they show, and writes SVG charts. Flags:\n\n")
		fs.PrintDefaults()
	}
	c := config{liveJobs: defaultLiveJobs, liveCalls: defaultLiveCalls, liveIngest: defaultLiveIngest}
	var clients string
	fs.StringVar(&c.study, "study", "all", "which study to run: contention, drill, hedging, ingest or all (with -live alone: none)")
	fs.StringVar(&clients, "clients", joinInts(defaultClients), "contention: client counts, comma-separated")
	fs.IntVar(&c.episodes, "episodes", defaultEpisodes, "contention: episodes averaged per point")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed; the same seed gives the same numbers")
	fs.BoolVar(&c.quick, "quick", false, fmt.Sprintf("a quicker contention sweep: clients %s only (unless -clients is given), the same points as the full sweep", joinInts(quickClients)))
	fs.BoolVar(&c.live, "live", false, "run a short drill, a hedging check and an ingestion check for real against loopback HTTP servers (about 40 s): alone, only those; with -study, after the studies")
	fs.StringVar(&c.out, "out", "", "folder for the SVG charts (default: a new temporary folder)")
	fs.IntVar(&c.jobs, "jobs", sim.DrillJobs, "drill: number of notification jobs")
	fs.IntVar(&c.calls, "calls", hedging.Calls, "hedging: calls per run")
	fs.IntVar(&c.writes, "writes", ingest.Writes, "ingest: the writes the outage leaves behind")
	fs.IntVar(&c.workers, "workers", runtime.GOMAXPROCS(0), "contention and hedging: goroutines running the runs")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick && !set["clients"] {
		clients = joinInts(quickClients)
	}
	if c.live && !set["study"] {
		c.study = "none"
	}
	var err error
	if c.clients, err = parseInts(clients); err != nil {
		return c, fmt.Errorf("-clients: %w", err)
	}
	switch c.study {
	case "all", "contention", "drill", "hedging", "ingest":
	case "none":
		if !c.live {
			return c, fmt.Errorf("-study: %q is not contention, drill, hedging, ingest or all", c.study)
		}
	default:
		return c, fmt.Errorf("-study: %q is not contention, drill, hedging, ingest or all", c.study)
	}
	if c.episodes < 1 {
		return c, errors.New("-episodes must be at least 1")
	}
	if c.jobs < 1 {
		return c, errors.New("-jobs must be at least 1")
	}
	if c.calls < 1 {
		return c, errors.New("-calls must be at least 1")
	}
	if c.writes < 1 {
		return c, errors.New("-writes must be at least 1")
	}
	c.workers = max(c.workers, 1)
	return c, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no client count given")
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// run is the command, with its flags and outputs as arguments, for tests.
func run(args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	return execute(c, stdout, stderr)
}

// execute runs what c asks for.
func execute(c config, stdout, stderr io.Writer) error {
	var err error
	start := time.Now()
	if c.out == "" {
		if c.out, err = os.MkdirTemp("", "retrysim-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var charts []string
	if c.study == "all" || c.study == "contention" {
		files, err := contentionStudy(c, stdout, newProgress(stderr))
		if err != nil {
			return err
		}
		charts = append(charts, files...)
	}
	if c.study == "all" || c.study == "drill" {
		files, err := drillStudy(c, stdout, stderr)
		if err != nil {
			return err
		}
		charts = append(charts, files...)
	}
	if c.study == "all" || c.study == "hedging" {
		files, err := hedgingStudy(c, stdout, stderr)
		if err != nil {
			return err
		}
		charts = append(charts, files...)
	}
	if c.study == "all" || c.study == "ingest" {
		files, err := ingestStudy(c, stdout, stderr)
		if err != nil {
			return err
		}
		charts = append(charts, files...)
	}
	if c.live {
		files, err := liveDrill(c, stdout, stderr)
		if err != nil {
			return err
		}
		charts = append(charts, files...)
		if err := liveHedging(c, stdout, stderr); err != nil {
			return err
		}
		if files, err = liveIngest(c, stdout, stderr); err != nil {
			return err
		}
		charts = append(charts, files...)
	}
	fmt.Fprintf(stderr, "done in %v\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "\nCharts (%d SVG files) written to %s\n", len(charts), c.out)
	for _, f := range charts {
		fmt.Fprintf(stdout, "  %s\n", f)
	}
	return nil
}

// progress reports a sweep's progress on standard error: on one line
// rewritten in place on a terminal, otherwise a line every tenth or so.
type progress struct {
	w         io.Writer
	terminal  bool
	lastTenth int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, lastTenth: -1}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) update(what string, done, total int) {
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s: %d/%d", what, done, total)
		if done == total {
			fmt.Fprintln(p.w)
		}
		return
	}
	if tenth := done * 10 / total; tenth != p.lastTenth || done == total {
		p.lastTenth = tenth
		fmt.Fprintf(p.w, "%s: %d/%d\n", what, done, total)
	}
}
