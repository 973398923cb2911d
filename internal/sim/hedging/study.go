package hedging

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim"
)

// Config is one run of the hedging study: Calls calls arrive at
// random (a Poisson process of Rate a second), each a call of retry.Do
// under Policy, modelled by the rules in model.go, against Server. The
// Policy's Budget and Hedge hold state, so a Config runs once; build a
// fresh one (Variants) for each run.
type Config struct {
	Name string
	// Change says, for a reader, what the variant's policy is.
	Change  string
	Calls   int
	Rate    float64       // calls a second
	Timeout time.Duration // each call's deadline after its start; 0: none
	Policy  retry.Policy
	Server  Server
	Seed    uint64
	// Trace records every attempt in Result.Trace.
	Trace bool
	// Answer, when set, stands for the server: attempt n of call i is
	// answered d after it is sent, with err, whatever the load. It is for
	// tests that compare the model with the core.
	Answer func(i, n int) (d time.Duration, err error)
	// Arrivals, when set, are the calls' start times, in order, instead of
	// the Poisson process.
	Arrivals []time.Duration
}

// Result is the outcome of one run of the hedging study.
type Result struct {
	Name      string
	Calls     int
	Latencies []time.Duration   // of the calls that succeeded, sorted
	Failed    []sim.ReasonCount // the calls that failed, by reason
	Attempts  int               // attempts sent, hedges and retries included
	Hedges    int               // attempts that were hedges
	// HedgedCalls is the number of calls that started a hedge.
	HedgedCalls int
	TimedOut    int // attempts ended by AttemptTimeout
	Cut         int // attempts the client cancelled in flight: losers, and those in flight at a deadline
	// At the server: attempts served (work started), queued, shed (503
	// at once, queue full), and dropped from the queue by a cancellation
	// before their turn (a stalled attempt cancelled is neither).
	Served, Queued, Shed, Dropped int
	// Work is the server's time spent on attempts: an attempt's whole
	// service time, or until its cancellation reached the server.
	Work time.Duration
	// End is when the last call ended.
	End time.Duration
	// HedgeDelay is the mean of the hedge delays the Policy's Hedge gave
	// (what an adaptive.Hedge learned, as the calls met it); 0 without a
	// Hedge.
	HedgeDelay time.Duration
	// PerSecond counts the attempts sent in each clock second of the run.
	PerSecond []int
	// Trace and CallTrace, when Config.Trace is set, record every
	// attempt and every call.
	Trace     []AttemptTrace
	CallTrace []CallTrace
}

// CallTrace is how one call of a traced run ended.
type CallTrace struct {
	Latency time.Duration // from its start to its end
	Reason  error         // nil: it succeeded
}

// AttemptTrace is one attempt of a traced run, its times from its call's
// start.
type AttemptTrace struct {
	Call, N    int
	Hedge      bool
	Start, End time.Duration // End is -1 if it never ended (not reached)
	// Cut is true for an attempt the call cancelled as it ended.
	Cut bool
}

// ExtraLoad returns the attempts beyond one per call, per call: the
// hedges and retries the policy added.
func (r Result) ExtraLoad() float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(r.Attempts)/float64(r.Calls) - 1
}

// AttemptsPerCall returns the attempts sent per call.
func (r Result) AttemptsPerCall() float64 { return 1 + r.ExtraLoad() }

// Succeeded returns the number of calls that succeeded.
func (r Result) Succeeded() int { return len(r.Latencies) }

// Quantile returns the nearest-rank quantile q of the latencies of the
// calls that succeeded (0 if none did).
func (r Result) Quantile(q float64) time.Duration { return sim.Percentile(r.Latencies, q) }

// Run runs one configuration of the hedging study in virtual time.
func Run(c Config) Result { return run(c, &memory{}) }

// memory is the memory of a run, kept for the next run on the same
// goroutine: a run of 50,000 calls needs some 15 MB, and fresh pages cost
// more than clearing used ones.
type memory struct {
	calls    []hcall
	attempts []sattempt
	slab     []hflight
}

func run(c Config, m *memory) Result {
	n := c.Calls
	if c.Arrivals != nil {
		n = len(c.Arrivals)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x4ed9e))
	r := &hedgeRun{
		c: c, p: c.Policy,
		calls: reuse(m.calls, n),
		srv:   serverState{cfg: c.Server, seed: c.Seed, answer: c.Answer},
		u:     rng.Float64,
		res:   Result{Name: c.Name, Calls: n, Latencies: make([]time.Duration, 0, n)},
	}
	r.srv.attempts = reuse(m.attempts, n+n/8)[:0]
	if k := r.maxInFlight(); k <= 8 {
		r.slab = k
	}
	slab := reuse(m.slab, r.slab*n)
	r.flightSlab = slab
	defer func() { m.calls, m.attempts, m.slab = r.calls, r.srv.attempts, slab }()
	if l, ok := c.Policy.HedgeDelay.(interface{ Learn(time.Duration, error) }); ok {
		r.learn = l
	}
	if c.Trace {
		r.traceOf = map[[2]int32]int{}
		r.res.CallTrace = make([]CallTrace, n)
	}
	// Arrivals: scheduled one ahead, so the queue holds a call's events,
	// not every call's arrival.
	arrival := func(k int) time.Duration {
		if c.Arrivals != nil {
			return c.Arrivals[k]
		}
		return 0
	}
	var at time.Duration
	next := func(k int) {
		if k >= n {
			return
		}
		if c.Arrivals != nil {
			at = arrival(k)
		} else if k > 0 {
			at += time.Duration(rng.ExpFloat64() / c.Rate * float64(time.Second))
		}
		r.q.Schedule(at, hedgeEvent{kind: hArrive, call: int32(k)})
	}
	next(0)
	for {
		// The earliest of the next event, deadline and attempt timeout; a
		// timer before an event due at the same time.
		at, ok := r.q.Peek()
		d, dok := r.deadlines.peek()
		t, tok := r.timeouts.peek()
		switch {
		case dok && (!ok || d.at <= at) && (!tok || d.at <= t.at):
			r.deadlines.pop()
			if c := &r.calls[d.call]; !c.done {
				r.finish(int(d.call), d.at, context.DeadlineExceeded)
			}
			continue
		case tok && (!ok || t.at <= at):
			r.timeouts.pop()
			r.timeout(int(t.call), int(t.n), t.at)
			continue
		case !ok:
		}
		ev, ok := r.q.Pop()
		if !ok {
			break
		}
		now, i := r.q.Now(), int(ev.call)
		switch ev.kind {
		case hArrive:
			next(i + 1)
			r.begin(i, now)
		case hFire:
			if c := &r.calls[i]; !c.done && c.planned && c.gen == ev.gen {
				r.fireDue(i, now)
			}
		case hAnswer:
			r.land(i, int(ev.n), now, ev.err)
		case hStallDone:
			r.srv.admit(r, ev.id, now)
		case hServiceDone:
			r.srv.done(r, ev.id, now, ev.err)
		case hCancelArrive:
			r.srv.cancelled(r, ev.id, now)
		}
	}
	slices.Sort(r.res.Latencies)
	if r.delays > 0 {
		r.res.HedgeDelay = time.Duration(r.delaySum / float64(r.delays))
	}
	return r.res
}

// Parameters of the hedging study.
const (
	Calls   = 50_000 // calls per run
	Workers = 50     // the server's workers: 10,000 attempts a second at 5 ms each
	Backlog = 500    // attempts that may wait for a worker; more are shed with 503
	// CallTimeout is every call's deadline, far above the slowest attempt
	// (1.1 s): it bounds a call that the overload holds up, no more.
	CallTimeout = 2 * time.Second
	// CancelDelay is the time a cancellation takes to reach the
	// server: a millisecond, a one-way trip in a data centre.
	CancelDelay = time.Millisecond
	// P95 is the p95 of the server's latency unloaded, rounded up to
	// the millisecond (5.94 ms: 95% of the attempts are within the 98%
	// that do not stall): the fixed hedge delay and the attempt timeout of
	// the variants that use one.
	P95 = 6 * time.Millisecond
)

// StudyServer returns the study's server.
func StudyServer() Server {
	return Server{Workers: Workers, Queue: Backlog, Latency: StudyTail, CancelDelay: CancelDelay}
}

// Scenario is a load on the study's server.
type Scenario struct {
	Name string
	// Load is the calls a second as a fraction of the server's capacity.
	Load float64
}

// Rate returns the scenario's calls a second.
func (s Scenario) Rate() float64 { return s.Load * StudyServer().Capacity() }

// The study's two loads: half the capacity, and a quarter above it.
var (
	Normal   = Scenario{Name: "half its capacity", Load: 0.5}
	Overload = Scenario{Name: "overloaded", Load: 1.25}
)

// Names are the names of the study's variants, in the order
// Variants returns them.
var Names = struct {
	None, Fixed, FixedBudget, Adaptive, AdaptiveBudget, RetryOnTimeout, BudgetOnly string
}{
	None:           "no hedging",
	Fixed:          "hedge at p95",
	FixedBudget:    "hedge at p95, budget",
	Adaptive:       "adaptive hedge",
	AdaptiveBudget: "adaptive hedge, budget",
	RetryOnTimeout: "retry on timeout",
	BudgetOnly:     "no hedging, budget",
}

// Variants returns the study's variants for a scenario, each with
// fresh state, each on the zero Policy (4 attempts, Exponential{} backoff,
// the default classifier, which retries a 503) with one or two things set:
//
//   - None: nothing;
//   - Fixed: HedgeDelay: retry.Constant(P95);
//   - FixedBudget: the same with Budget: retry.NewBudget(0.1, 0);
//   - Adaptive: HedgeDelay: &adaptive.Hedge{} (p95 of the recent successes, 10 ms floor);
//   - AdaptiveBudget: the same with the budget;
//   - RetryOnTimeout: AttemptTimeout: P95 and Backoff: retry.Constant(0),
//     a timed-out attempt retried at once;
//   - BudgetOnly: the budget alone, no hedging.
func Variants(s Scenario, seed uint64) []Config {
	base := func(name, change string, p retry.Policy) Config {
		return Config{
			Name: name, Change: change, Calls: Calls, Rate: s.Rate(), Timeout: CallTimeout,
			Policy: p, Server: StudyServer(), Seed: seed,
		}
	}
	budget := func() retry.Budget { return retry.NewBudget(0.1, 0) }
	return []Config{
		base(Names.None, "the zero Policy: 4 attempts, Exponential{} backoff, a 503 retried", retry.Policy{}),
		base(Names.Fixed, "HedgeDelay: retry.Constant(6ms)", retry.Policy{HedgeDelay: retry.Constant(P95)}),
		base(Names.FixedBudget, "HedgeDelay: retry.Constant(6ms), Budget: retry.NewBudget(0.1, 0)",
			retry.Policy{HedgeDelay: retry.Constant(P95), Budget: budget()}),
		base(Names.Adaptive, "HedgeDelay: &adaptive.Hedge{} (p95 of recent successes, floor 10ms)",
			retry.Policy{HedgeDelay: &adaptive.Hedge{}}),
		base(Names.AdaptiveBudget, "HedgeDelay: &adaptive.Hedge{}, Budget: retry.NewBudget(0.1, 0)",
			retry.Policy{HedgeDelay: &adaptive.Hedge{}, Budget: budget()}),
		base(Names.RetryOnTimeout, "AttemptTimeout: 6ms, Backoff: retry.Constant(0): a timed-out attempt retried at once",
			retry.Policy{AttemptTimeout: P95, Backoff: retry.Constant(0)}),
		base(Names.BudgetOnly, "Budget: retry.NewBudget(0.1, 0), no hedging", retry.Policy{Budget: budget()}),
	}
}

// RunAll runs the configurations on up to workers goroutines and
// returns their results in order. Each run is independent and seeded, so
// the results do not depend on workers.
func RunAll(cs []Config, workers int) []Result {
	out := make([]Result, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(workers, 1), len(cs)) {
		wg.Go(func() {
			var m memory
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) {
					return
				}
				out[i] = run(cs[i], &m)
			}
		})
	}
	wg.Wait()
	return out
}

// reuse returns s cleared and of length n if its capacity allows, or a new
// slice of length n.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
