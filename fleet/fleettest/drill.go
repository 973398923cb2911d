package fleettest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
)

// Drill is a run of several real processes that share one limit: copies of
// the test binary, each running Goroutines goroutines that make one-attempt
// calls through the process's [retry.Limiter] as fast as it lets them, for
// Duration, all from the same moment. The parent process counts the attempts
// they report.
//
// The test binary's TestMain makes the workers: when [Worker] reports that
// the process is one, it builds its Limiter from the Drill (Name, Rate,
// Burst, Fallback, Timeout) and calls Work, which exits:
//
//	func TestMain(m *testing.M) {
//		if d, ok := fleettest.Worker(); ok {
//			d.Work(newLimiter(d))
//			return
//		}
//		os.Exit(m.Run())
//	}
type Drill struct {
	Procs      int           // worker processes
	Goroutines int           // in each
	Duration   time.Duration // of the run
	Name       string        // of the limit on the store
	Rate       float64       // attempts per second, for the whole fleet
	Burst      int
	Fallback   float64       // fleet.Options.Fallback
	Timeout    time.Duration // fleet.Options.Timeout
	Start      time.Time     // set by Run
}

// Result is what a Drill's workers reported.
type Result struct {
	Drill
	// Starts holds when each attempt started, in every process, in order,
	// from the Drill's start. Attempts after Duration are not counted.
	Starts []time.Duration
	// Errors counts the calls that stopped without an attempt, by their
	// error's text.
	Errors map[string]int
}

const workerEnv = "FLEETTEST_DRILL"

// Worker reports whether this process is a worker of a Drill, and which.
func Worker() (Drill, bool) {
	v := os.Getenv(workerEnv)
	if v == "" {
		return Drill{}, false
	}
	var d Drill
	if err := json.Unmarshal([]byte(v), &d); err != nil {
		fmt.Fprintln(os.Stderr, "fleettest: bad", workerEnv, err)
		os.Exit(2)
	}
	return d, true
}

// Work runs the worker's goroutines through lim from the Drill's start for
// its Duration, reports to the parent on stdout, and exits.
func (d Drill) Work(lim retry.Limiter) {
	time.Sleep(time.Until(d.Start))
	// The workers go on for a second past the Duration, which the parent
	// does not count, so that the end of the run does not show in it.
	ctx, cancel := context.WithDeadline(context.Background(), d.Start.Add(d.Duration+time.Second))
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	errs := map[string]int{}
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range d.Goroutines {
		wg.Go(func() {
			starts := make([]int64, 0, 1024)
			defer func() {
				mu.Lock()
				for _, s := range starts {
					fmt.Fprintln(out, "a", s)
				}
				mu.Unlock()
			}()
			for ctx.Err() == nil && !stop.Load() {
				attempted := false
				err := retry.Do(ctx, func(context.Context) error {
					attempted = true
					starts = append(starts, time.Since(d.Start).Nanoseconds())
					return nil
				}, retry.Policy{MaxAttempts: 1, Limiter: lim})
				switch {
				case attempted:
				case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
					// The run is over, or this goroutine's next slot is past
					// its end (retry.ErrNoTimeLeft; the loop also counts the
					// deadline passed a moment before ctx's timer fires).
					return
				default:
					mu.Lock()
					errs[reason(err)]++
					mu.Unlock()
					time.Sleep(time.Millisecond) // a failing store must not make this a busy loop
				}
			}
		})
	}
	wg.Wait()
	for e, n := range errs {
		fmt.Fprintf(out, "e %d %s\n", n, strconv.Quote(e))
	}
	out.Flush()
	os.Exit(0)
}

func reason(err error) string {
	var re *retry.Error
	if errors.As(err, &re) && re.Reason != nil {
		return re.Reason.Error()
	}
	return err.Error()
}

// Run starts the Drill's worker processes, with extra environment env
// (NAME=value), waits for them, and returns what they reported. It starts
// them 2s ahead of the Drill's start, so that all are ready. during, if not
// nil, runs meanwhile, from the start: to stop the store halfway, say.
func (d Drill) Run(t testing.TB, during func(start time.Time), env ...string) Result {
	t.Helper()
	d.Start = time.Now().Add(2 * time.Second)
	spec, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	res := Result{Drill: d, Errors: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range d.Procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), workerEnv+"="+string(spec)), env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			lines := bufio.NewScanner(out)
			var starts []time.Duration
			errs := map[string]int{}
			for lines.Scan() {
				kind, rest, _ := strings.Cut(lines.Text(), " ")
				switch kind {
				case "a":
					if ns, err := strconv.ParseInt(rest, 10, 64); err == nil && ns < d.Duration.Nanoseconds() {
						starts = append(starts, time.Duration(ns))
					}
				case "e":
					count, text, _ := strings.Cut(rest, " ")
					n, _ := strconv.Atoi(count)
					if s, err := strconv.Unquote(text); err == nil {
						errs[s] += n
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
			mu.Lock()
			res.Starts = append(res.Starts, starts...)
			for e, n := range errs {
				res.Errors[e] += n
			}
			mu.Unlock()
		})
	}
	if during != nil {
		wg.Go(func() {
			time.Sleep(time.Until(d.Start))
			during(d.Start)
		})
	}
	wg.Wait()
	slices.Sort(res.Starts)
	return res
}

// MostWithin returns the most attempts that started within any window of
// length w, [x, x+w).
func (r Result) MostWithin(w time.Duration) int {
	most, j := 0, 0
	for i := range r.Starts {
		for j < len(r.Starts) && r.Starts[j]-r.Starts[i] < w {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// Between returns the attempts that started in [from, to) after the start.
func (r Result) Between(from, to time.Duration) int {
	lo, _ := slices.BinarySearch(r.Starts, from)
	hi, _ := slices.BinarySearch(r.Starts, to)
	return hi - lo
}

// PerSecond returns the attempts that started in each second of the run.
func (r Result) PerSecond() []int {
	n := make([]int, (r.Duration+time.Second-1)/time.Second)
	for _, s := range r.Starts {
		n[s/time.Second]++
	}
	return n
}

// String sums the run up: attempts, the rate they make over the Duration
// against the limit's, and the most in any second.
func (r Result) String() string {
	return fmt.Sprintf("%d procs x %d goroutines, limit %v/s burst %d: %d attempts in %v = %.1f/s (%.3f x the rate), at most %d in a second, by second %v, errors %v",
		r.Procs, r.Goroutines, r.Rate, r.Burst, len(r.Starts), r.Duration,
		float64(len(r.Starts))/r.Duration.Seconds(), float64(len(r.Starts))/r.Duration.Seconds()/r.Rate, r.MostWithin(time.Second), r.PerSecond(), r.Errors)
}
