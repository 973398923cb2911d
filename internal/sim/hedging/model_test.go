package hedging_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim/hedging"
)

// compareScenario is a small population of calls for the comparison of the
// model with the core: arrivals at distinct instants, and attempts answered
// by a pure function of the call and the attempt's number, so that both
// see the same server whatever the load.
type compareScenario struct {
	name     string
	policy   func() retry.Policy // fresh state (Budget, Hedge) for each run
	timeout  time.Duration       // each call's deadline; 0: none
	answer   func(i, n int) (time.Duration, error)
	arrivals []time.Duration
}

// A slower tail than the study's, so that a small population hedges often:
// 20% of attempts stall 40-60 ms.
var compareTail = hedging.Tail{
	WorkMin: 2 * ms, WorkMax: 6 * ms,
	StallMin: 40 * ms, StallMax: 60 * ms,
	Slow: 0.2,
}

var err503 = &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"}

// answers returns the scenario's server: attempt n of call i takes
// compareTail's time, and one in every failEvery attempts (by a hash of i
// and n) answers 503 after 1.5ms instead (a time no hedge delay of the
// scenarios can end at: at one instant, the core's order is its select's).
func answers(seed uint64, failEvery int) func(i, n int) (time.Duration, error) {
	return func(i, n int) (time.Duration, error) {
		d := compareTail.At(seed, i, n)
		h := uint64(i)*0x9E3779B97F4A7C15 ^ uint64(n)*0xC2B2AE3D27D4EB4F
		if h ^= h >> 29; failEvery > 0 && h%uint64(failEvery) == 0 {
			return 3 * ms / 2, err503
		}
		return d, nil
	}
}

// arrivalsEvery returns n arrivals about gap apart, each offset by a few
// microseconds so that no two calls share an instant.
func arrivalsEvery(n int, gap time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i)*gap + time.Duration((i*7919)%997)*time.Microsecond
	}
	return out
}

var compareScenarios = []compareScenario{
	{
		name: "hedge at 10ms, default limits, 10% budget",
		policy: func() retry.Policy {
			return retry.Policy{HedgeDelay: retry.Constant(10 * ms), Budget: retry.NewBudget(0.1, 0)}
		},
		answer: answers(1, 0),
	},
	{
		name: "hedge at 3ms, 3 in flight, 4 attempts, 503s replaced, timeouts, a deadline",
		policy: func() retry.Policy {
			return retry.Policy{
				HedgeDelay: retry.Constant(3 * ms), MaxInFlight: 3, MaxAttempts: 4,
				Backoff: retry.Constant(4 * ms), AttemptTimeout: 20 * ms, MinAttemptTime: 5 * ms,
			}
		},
		timeout: 45 * ms,
		answer:  answers(2, 3),
	},
	{
		name: "adaptive hedge, 20% budget, 503s",
		policy: func() retry.Policy {
			return retry.Policy{
				HedgeDelay: &adaptive.Hedge{Floor: 2 * ms, Quantile: 0.8}, Budget: retry.NewBudget(0.2, 0),
				Backoff: retry.Exponential{Base: 5 * ms, Jitter: retry.NoJitter}, // jitter would draw differently
			}
		},
		answer: answers(3, 11),
	},
	{
		name: "unlimited attempts, a hedge delay that grows",
		policy: func() retry.Policy {
			return retry.Policy{
				HedgeDelay: retry.Exponential{Base: 2 * ms, Jitter: retry.NoJitter}, MaxAttempts: -1, MaxInFlight: 4,
				Backoff: retry.Exponential{Base: ms, Jitter: retry.NoJitter},
			}
		},
		timeout: 45 * ms,
		answer:  answers(4, 5),
	},
	{
		name: "no hedge: retry on timeout",
		policy: func() retry.Policy {
			return retry.Policy{AttemptTimeout: 8 * ms, Backoff: retry.Constant(ms)}
		},
		answer: answers(5, 0),
	},
	{
		name: "no hedge: 503s retried, a deadline, a budget",
		policy: func() retry.Policy {
			return retry.Policy{
				Backoff: retry.Exponential{Base: 3 * ms, Jitter: retry.NoJitter}, Budget: retry.NewBudget(0.5, 0),
				MinAttemptTime: 8 * ms,
			}
		},
		timeout: 30 * ms,
		answer:  answers(6, 2),
	},
}

// coreCall is what the core did in one call: its attempts and how it ended.
type coreCall struct {
	attempts []hedging.AttemptTrace
	end      hedging.CallTrace
}

// runCore runs the scenario's calls through retry.Do in a synctest bubble,
// each on a goroutine of its own, started at its arrival time, and records
// every attempt as the model traces it.
func runCore(t *testing.T, sc compareScenario) []coreCall {
	out := make([]coreCall, len(sc.arrivals))
	synctest.Test(t, func(t *testing.T) {
		p := sc.policy()
		p.AttemptInContext = true // AttemptFrom then numbers the attempts of a plain call too
		var wg sync.WaitGroup
		for i, at := range sc.arrivals {
			wg.Go(func() {
				time.Sleep(at)
				start := time.Now()
				var mu sync.Mutex
				byN := map[int]*hedging.AttemptTrace{}
				fn := func(ctx context.Context) error {
					n := retry.AttemptFrom(ctx)
					a := &hedging.AttemptTrace{Call: i, N: n, Start: time.Since(start), End: -1}
					mu.Lock()
					byN[n] = a
					mu.Unlock()
					d, err := sc.answer(i, n)
					timer := time.NewTimer(d)
					defer timer.Stop()
					select {
					case <-timer.C:
						mu.Lock()
						a.End = time.Since(start)
						mu.Unlock()
						return err
					case <-ctx.Done():
						mu.Lock()
						a.End = time.Since(start)
						mu.Unlock()
						return ctx.Err()
					}
				}
				call := p
				call.Observe = func(_ context.Context, e retry.Event) {
					if e.Done || e.Attempt == 0 {
						return
					}
					mu.Lock()
					if a := byN[e.Attempt]; a != nil {
						a.Hedge = e.Hedge
					}
					mu.Unlock()
				}
				ctx := context.Background()
				if sc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, sc.timeout)
					defer cancel()
				}
				err := retry.Do(ctx, fn, call)
				c := coreCall{end: hedging.CallTrace{Latency: time.Since(start)}}
				var re *retry.Error
				if errors.As(err, &re) {
					c.end.Reason = re.Reason
				} else if err != nil {
					c.end.Reason = err
				}
				for n := 1; n <= len(byN); n++ {
					c.attempts = append(c.attempts, *byN[n])
				}
				out[i] = c
			})
		}
		wg.Wait()
	})
	return out
}

// TestHedgeModelMatchesTheCore runs each scenario through the model and
// through retry.Do in a synctest bubble, where time is exact, and compares
// every call: the same attempts, each a hedge or not alike, starting and
// ending at the same times, and the same outcome at the same time. The
// tolerance is 0 (both run on exact clocks and the scenarios have no two
// events at one instant): any difference is a rule the model gets wrong.
// The cut of losers is compared through their end times, which are when
// the call cancelled them.
func TestHedgeModelMatchesTheCore(t *testing.T) {
	t.Parallel()
	for _, sc := range compareScenarios {
		sc.arrivals = arrivalsEvery(300, 4*ms)
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			model := hedging.Run(hedging.Config{
				Name: sc.name, Policy: sc.policy(), Timeout: sc.timeout,
				Answer: sc.answer, Arrivals: sc.arrivals, Trace: true,
			})
			core := runCore(t, sc)
			modelAttempts := make([][]hedging.AttemptTrace, len(sc.arrivals))
			for _, a := range model.Trace {
				modelAttempts[a.Call] = append(modelAttempts[a.Call], a)
			}
			hedges, failed, total := 0, 0, 0
			for i := range sc.arrivals {
				want, got := core[i], modelAttempts[i]
				if !assert.Equal(t, describe(want.attempts), describe(got), "call %d: attempts", i) {
					continue
				}
				assert.Equal(t, want.end.Latency, model.CallTrace[i].Latency, "call %d: latency", i)
				assert.Equal(t, reasonOf(want.end.Reason), reasonOf(model.CallTrace[i].Reason), "call %d: outcome", i)
				for _, a := range got {
					if a.Hedge {
						hedges++
					}
				}
				if want.end.Reason != nil {
					failed++
				}
				total += len(got)
			}
			assert.Equal(t, total, model.Attempts)
			t.Logf("%d calls, %d attempts, %d hedges, %d failed: %v", len(sc.arrivals), total, hedges, failed, model.Failed)
			// Each scenario exercises hedging or retrying, not just first tries.
			assert.Greater(t, total, len(sc.arrivals)+len(sc.arrivals)/20)
		})
	}
}

// describe renders attempts for a comparison that shows a difference
// whole.
func describe(as []hedging.AttemptTrace) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = fmt.Sprintf("#%d hedge=%v %v-%v", a.N, a.Hedge, a.Start, a.End)
	}
	return out
}

func reasonOf(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

func BenchmarkHedgeStudy(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range []hedging.Scenario{hedging.Normal, hedging.Overload} {
			for _, c := range hedging.Variants(s, 1) {
				hedging.Run(c)
			}
		}
	}
}
