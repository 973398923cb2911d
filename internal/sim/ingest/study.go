package ingest

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

// Parameters of the study.
const (
	Writes  = 50_000
	Writers = 2_000
	Outage  = 10 * time.Second
	// StorageSlots is C: the writes the storage serves at once at its base
	// latency, a work time of WorkMin to WorkMax.
	StorageSlots   = 100
	WorkMin        = 40 * time.Millisecond
	WorkMax        = 60 * time.Millisecond
	AttemptTimeout = 500 * time.Millisecond
	// ChangeAt is when the storage's capacity halves or doubles in the
	// second scenario, 10 s into the drain.
	ChangeAt = 20 * time.Second
	// Horizon ends a run that has not drained.
	Horizon = 4 * time.Minute
	// RateBurst is the rate limit's burst.
	RateBurst = 100
)

// FixedSizes are the fixed concurrency limits the study sweeps.
var FixedSizes = []int{25, 50, 75, 100, 150, 200, 500, 750, 1000}

// StudyStorage returns the storage of the first scenario: C slots, down
// for the first Outage.
func StudyStorage() Storage {
	return Storage{Slots: StorageSlots, WorkMin: WorkMin, WorkMax: WorkMax, Outage: Outage}
}

// ChangedHorizon ends a run of the second scenario that has not drained:
// 60 s after the change is time enough to show that it will not.
const ChangedHorizon = 80 * time.Second

// Changed returns StudyStorage with its slots changed to slots at
// ChangeAt.
func Changed(slots int) Storage {
	s := StudyStorage()
	s.ChangeAt, s.ChangedSlots = ChangeAt, slots
	return s
}

// Policy returns the writers' policy before any bound: every write retried
// until it is stored (MaxAttempts -1), Exponential{Base: 100ms, Cap: 2s}
// with full jitter, each attempt cut at AttemptTimeout.
func Policy() retry.Policy {
	return retry.Policy{
		MaxAttempts:    -1,
		Backoff:        retry.Exponential{Base: 100 * time.Millisecond, Cap: 2 * time.Second},
		AttemptTimeout: AttemptTimeout,
	}
}

// Names of the variants.
var Names = struct {
	None, Rate, Fixed, Adaptive, AdaptiveBreaker string
}{
	None:            "no bound",
	Rate:            "rate limit alone",
	Fixed:           "fixed limit",
	Adaptive:        "adaptive limit",
	AdaptiveBreaker: "adaptive + breaker",
}

// Variant builds one run of the study against st: name is one of Names,
// slots the fixed limit's size (for Names.Fixed), adaptive a fresh
// adaptive concurrency limit (for the adaptive variants).
func Variant(name string, st Storage, seed uint64, slots int, adaptive func() Slots) Config {
	c := Config{Name: name, Writes: Writes, Writers: Writers, Arrival: Outage, Storage: st, Policy: Policy(), Seed: seed, Horizon: Horizon}
	if st.ChangeAt > 0 {
		c.Horizon = ChangedHorizon
	}
	switch name {
	case Names.None:
		c.Change = "nothing but the writers' own count"
	case Names.Rate:
		c.Change = "Limiter: rate.NewLimiter(2000, 100), the storage's throughput at C, told in advance"
		c.Policy.Limiter = &sim.VirtualLimiter{Limiter: rate.NewLimiter(rate.Limit(st.Capacity(st.Slots)), RateBurst)}
	case Names.Fixed:
		c.Change = "Concurrency: &retry.ConcurrencyLimit{Slots: n}"
		c.Policy.Concurrency = &retry.ConcurrencyLimit{Slots: slots}
	case Names.Adaptive:
		c.Change = "Concurrency: &adaptive.Concurrency{}, told nothing"
		c.Policy.Concurrency = adaptive()
	case Names.AdaptiveBreaker:
		c.Change = "the adaptive limit, and Breaker: &retry.CircuitBreaker{} (its defaults)"
		c.Policy.Concurrency = adaptive()
		c.Policy.Breaker = &retry.CircuitBreaker{}
	default:
		panic("ingest: no variant " + name)
	}
	return c
}

// RunAll runs cs on workers goroutines and returns their results in order.
func RunAll(cs []Config, workers int) []Result {
	out := make([]Result, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(workers, 1), len(cs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) {
					return
				}
				out[i] = Run(cs[i])
			}
		})
	}
	wg.Wait()
	return out
}

// Best returns the index of the fixed limit chosen in hindsight from a
// sweep: the one that drained soonest, and of those within 1% of it, the
// one with the lowest p99 latency.
func Best(sweep []Result) int {
	best := -1
	for i, r := range sweep {
		if !r.Drained {
			continue
		}
		if best < 0 || r.Done < sweep[best].Done {
			best = i
		}
	}
	if best < 0 {
		return 0
	}
	soonest := sweep[best].Done
	for i, r := range sweep {
		if r.Drained && float64(r.Done) <= 1.01*float64(soonest) && r.Quantile(0.99) < sweep[best].Quantile(0.99) {
			best = i
		}
	}
	return best
}

// Recovery returns how long after the storage's change at st.ChangeAt a
// run first held at most 1.3 times the new slot count for a whole second
// while storing at least 90% of the new capacity in it; ok is false if it
// never did before it drained.
func Recovery(r Result, st Storage) (d time.Duration, ok bool) {
	per := int(time.Second / TraceBin)
	limit := 1.3 * float64(st.ChangedSlots)
	want := 0.9 * st.Capacity(st.ChangedSlots)
	from := int(st.ChangeAt / TraceBin)
	for k := from; k+per <= len(r.HeldPeak); k++ {
		window := r.HeldPeak[k : k+per]
		if float64(slices.Max(window)) > limit {
			continue
		}
		stored := 0
		for _, n := range r.StoredIn[k : k+per] {
			stored += n
		}
		if float64(stored) >= want {
			return time.Duration(k-from) * TraceBin, true
		}
	}
	return 0, false
}

// PeakFrom returns the most writes the storage held from t on.
func PeakFrom(r Result, t time.Duration) int {
	peak := 0
	for k := int(t / TraceBin); k < len(r.HeldPeak); k++ {
		peak = max(peak, r.HeldPeak[k])
	}
	return peak
}
