package adaptive

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Hedge.
const (
	defaultQuantile = 0.95
	maxQuantile     = 0.999
	defaultFloor    = 10 * time.Millisecond
	defaultCap      = 10 * time.Second
	leastWindow     = 1000 // successes kept, at least
)

// Hedge is a [retry.Backoff] for [retry.Policy].Hedge whose delay follows
// the latencies of the calls that share it: the delay before each hedge is
// the Quantile of the durations of the recent successful attempts it has
// been told of, never below Floor nor above Cap. Until it has seen enough
// successes to place that quantile (10/(1-Quantile): 200 at p95), the delay
// is Floor. The loop tells it of every attempt the call did not cancel,
// through Learn, so one Hedge shared by every call to a dependency learns
// that dependency:
//
//	hedge := &adaptive.Hedge{}
//	policy := retry.Policy{HedgeDelay: hedge, Budget: retry.NewBudget(0.05, 1)}
//
// It keeps the last max(1000, 20/(1-Quantile)) successes (1000 at p95) in
// a ring, each as its bucket of a log-linear histogram whose buckets are at
// most 1/32 of their values wide, so its memory is bounded (2 bytes a
// success and 4 a bucket between Floor and Cap: 3.3 KB at the defaults)
// and its delay is the quantile of those successes rounded up to its
// bucket's end: at most 3.2% above the exact one, never below. The
// successes it is told of leave out the slowest attempts, those that a
// hedge beat and the call cancelled, so with hedging on, its quantile sits
// below the quantile of unhedged latencies, and somewhat more than
// 1-Quantile of the calls hedge; the package doc gives the figures, and a
// Budget caps the extra load.
//
// The zero value is ready to use: p95, a Floor of 10ms and a Cap of 10s. A
// Hedge is safe for concurrent use by any number of goroutines: Learn holds
// one short lock to write three words, and Delay reads two atomics, except
// once every 1/64 of the window, when it scans the histogram under the
// lock. Do not copy it once used, nor change its fields: the first Delay or
// Learn reads them.
type Hedge struct {
	// Quantile is the quantile of the recent latencies that the delay is,
	// in (0, 1). 0 (or a value outside (0, 1), or NaN) means 0.95; above
	// 0.999 counts as 0.999.
	Quantile float64

	// Floor is the least delay, and the delay until enough successes have
	// been seen. 0 means 10ms; a negative Floor means none.
	Floor time.Duration

	// Cap is the greatest delay, so that a slow spell does not end hedging
	// for long. 0 means 10s; a Cap below Floor counts as Floor, which makes
	// the delay constant.
	Cap time.Duration

	state atomic.Pointer[hedgeState]
}

// hedgeState is a Hedge's learned state, made on first use from its
// fields.
type hedgeState struct {
	q          float64
	floor, cap time.Duration
	lo         int // the histogram index of floor
	minSamples uint64
	refresh    uint64 // the samples between two scans

	// One short lock guards the window: a Learn writes three words under
	// it. On a b.RunParallel benchmark it costs 21ns where the same with
	// atomics and no lock cost 34ns, for the four atomic writes to shared
	// lines that replace it.
	mu sync.Mutex
	// ring holds, for each of the last len(ring) successes, 1 + the index
	// in counts of its bucket; 0 for a slot not yet used. counts[0] counts
	// those below floor, counts[len-1] those at or above cap.
	ring   []uint16
	counts []int32
	n      uint64 // successes learned

	// Read by every Delay without the lock, each on its own line.
	_       [64]byte
	seen    atomic.Uint64 // n, as of the last Learn
	_       [56]byte
	delay   atomic.Int64  // the last scan's delay
	delayAt atomic.Uint64 // n at that scan
}

// Delay returns the delay before hedge n: the Quantile of the recent
// successes, within [Floor, Cap]; Floor until enough have been seen. n,
// prev and u are not used: every hedge of a call waits the same delay after
// the attempt before it.
func (h *Hedge) Delay(n int, prev time.Duration, u float64) time.Duration {
	s := h.load()
	seen := s.seen.Load()
	if seen < s.minSamples {
		return s.floor
	}
	if at := s.delayAt.Load(); at != 0 && seen-at < s.refresh {
		return time.Duration(s.delay.Load())
	}
	s.mu.Lock()
	seen = s.n
	d := s.quantile(seen)
	s.mu.Unlock()
	s.delay.Store(int64(d))
	s.delayAt.Store(seen)
	return d
}

// Learn is told how an attempt ended: its duration d and its error. Only a
// success (err nil) is kept, as the latest of the window, replacing the
// oldest; a negative d counts as 0.
func (h *Hedge) Learn(d time.Duration, err error) {
	if err != nil {
		return
	}
	s := h.load()
	j := uint16(s.slotOf(d) + 1)
	s.mu.Lock()
	i := s.n % uint64(len(s.ring))
	if old := s.ring[i]; old != 0 {
		s.counts[old-1]--
	}
	s.ring[i] = j
	s.counts[j-1]++
	s.n++
	s.seen.Store(s.n)
	s.mu.Unlock()
}

// load returns h's state, made from its fields on first use.
func (h *Hedge) load() *hedgeState {
	if s := h.state.Load(); s != nil {
		return s
	}
	s := newHedgeState(h.Quantile, h.Floor, h.Cap)
	if h.state.CompareAndSwap(nil, s) {
		return s
	}
	return h.state.Load()
}

func newHedgeState(q float64, floor, ceiling time.Duration) *hedgeState {
	switch {
	case !(q > 0 && q < 1):
		q = defaultQuantile
	case q > maxQuantile:
		q = maxQuantile
	}
	switch {
	case floor == 0:
		floor = defaultFloor
	case floor < 0:
		floor = 0
	}
	if ceiling == 0 {
		ceiling = defaultCap
	}
	ceiling = max(ceiling, floor)
	tail := 1 - q
	window := max(leastWindow, int(math.Ceil(20/tail)))
	s := &hedgeState{
		q:          q,
		floor:      floor,
		cap:        ceiling,
		lo:         index(uint64(floor)),
		ring:       make([]uint16, window),
		minSamples: uint64(math.Ceil(10 / tail)),
		refresh:    uint64(max(1, window/64)),
	}
	// Below floor, one bucket per index from floor's to that of the last
	// value below cap, at or above cap.
	s.counts = make([]int32, index(uint64(ceiling))-s.lo+3)
	return s
}

// slotOf returns the index in counts of the bucket of d.
func (s *hedgeState) slotOf(d time.Duration) int {
	switch {
	case d < s.floor:
		return 0
	case d >= s.cap:
		return len(s.counts) - 1
	}
	return index(uint64(d)) - s.lo + 1
}

// quantile scans the histogram of the last min(seen, window) successes,
// under s.mu.
func (s *hedgeState) quantile(seen uint64) time.Duration {
	total := min(seen, uint64(len(s.ring)))
	rank := int64(math.Ceil(s.q * float64(total)))
	var cum int64
	last := len(s.counts) - 1
	for j := range s.counts {
		if cum += int64(s.counts[j]); cum < rank {
			continue
		}
		switch j {
		case 0:
			return s.floor
		case last:
			return s.cap
		}
		return min(max(time.Duration(upper(s.lo+j-1)), s.floor), s.cap)
	}
	return s.cap // not reached: the counts add up to total
}

// The histogram is log-linear: values below 2*sub have a bucket each;
// above, each power of two is cut into sub buckets, so that a bucket is at
// most 1/sub of its values wide.
const (
	subBits = 5
	sub     = 1 << subBits
)

// index returns the bucket of v.
func index(v uint64) int {
	if v < 2*sub {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)*sub + int(v>>shift) - sub
}

// upper returns the end of bucket i: the least value above all of its own,
// saturating at the largest int64.
func upper(i int) uint64 {
	if i < 2*sub {
		return uint64(i + 1)
	}
	shift := i/sub - 1
	mantissa := uint64(i%sub + sub)
	if shift >= 64-subBits-1 {
		return math.MaxInt64
	}
	return min((mantissa+1)<<shift, math.MaxInt64)
}
