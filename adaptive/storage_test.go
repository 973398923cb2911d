package adaptive_test

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
)

// storage is an in-process dependency that serves capacity(since) writes
// at once, each in base latency plus up to spread times it more (a tenth
// unless set; seeded), and
// queues the rest in arrival order: above its capacity, a write's latency
// grows with the queue ahead of it, until it would pass timeout, when the
// writer gives up at timeout with context.DeadlineExceeded (the storage
// still does the work, as a real one would). A write is scheduled as it
// arrives, on the worker free first, so the storage needs no goroutine.
type storage struct {
	start    time.Time
	capacity func(since time.Duration) int
	base     time.Duration
	spread   float64
	timeout  time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	workers freeTimes // when each of the capacity workers is next free, as offsets from start
}

func newStorage(capacity func(time.Duration) int, base time.Duration) *storage {
	return &storage{
		start: time.Now(), capacity: capacity, base: base, spread: 0.1, timeout: 10 * base,
		rng: rand.New(rand.NewPCG(1, 2)),
	}
}

// write is one attempt at the storage. It returns ctx's error if ctx ends
// first.
func (s *storage) write(ctx context.Context) error {
	now := time.Since(s.start)
	s.mu.Lock()
	c := s.capacity(now)
	for s.workers.Len() < c {
		heap.Push(&s.workers, now)
	}
	for s.workers.Len() > c {
		// Fewer workers: the ones free last go (their writes still end).
		last := 0
		for i, t := range s.workers {
			if t > s.workers[last] {
				last = i
			}
		}
		heap.Remove(&s.workers, last)
	}
	begin := max(now, s.workers[0])
	end := begin + s.base + time.Duration(s.rng.Float64()*s.spread*float64(s.base))
	s.workers[0] = end
	heap.Fix(&s.workers, 0)
	s.mu.Unlock()

	wait, err := end-now, error(nil)
	if wait > s.timeout {
		wait, err = s.timeout, context.DeadlineExceeded
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// perSecond is what the storage serves a second at capacity c: c writes
// every mean latency, 1+spread/2 base latencies.
func (s *storage) perSecond(c int) float64 {
	return float64(c) / ((1 + s.spread/2) * s.base.Seconds())
}

type freeTimes []time.Duration

func (h freeTimes) Len() int           { return len(h) }
func (h freeTimes) Less(i, j int) bool { return h[i] < h[j] }
func (h freeTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *freeTimes) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *freeTimes) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// span counts what the writers saw in one window of time.
type span struct {
	written, timedOut, throttled int
	peak                         int // the most slots in flight
	limitLow, limitHigh          int
}

// load is a run of writers against a storage, each taking a slot from slots
// for each write.
type load struct {
	slots  retry.Concurrency
	write  func(ctx context.Context) error
	start  time.Time
	window time.Duration

	mu    sync.Mutex
	spans []span
}

// inFlight and limit read the Concurrency's metrics, when it has them.
type metered interface {
	InFlight() int
	Limit() int
}

func (l *load) span(at time.Time) *span {
	i := int(at.Sub(l.start) / l.window)
	for len(l.spans) <= i {
		l.spans = append(l.spans, span{limitLow: 1 << 30})
	}
	return &l.spans[i]
}

// one takes a slot, writes, and gives it back, recording the outcome.
func (l *load) one(ctx context.Context) error {
	release, err := l.slots.Acquire(ctx, time.Time{})
	if err != nil {
		return err
	}
	m, _ := l.slots.(metered)
	l.mu.Lock()
	if m != nil {
		sp := l.span(time.Now())
		sp.peak = max(sp.peak, m.InFlight())
		lim := m.Limit()
		sp.limitLow, sp.limitHigh = min(sp.limitLow, lim), max(sp.limitHigh, lim)
	}
	l.mu.Unlock()
	begin := time.Now()
	err = l.write(ctx)
	d := time.Since(begin)
	l.mu.Lock()
	sp := l.span(time.Now())
	switch {
	case err == nil:
		sp.written++
	case err == context.DeadlineExceeded:
		sp.timedOut++
	default:
		sp.throttled++
	}
	l.mu.Unlock()
	release(d, err)
	return err
}

// run starts n writers that write until the time is up (until > 0), or
// until backlog writes have succeeded (backlog > 0; a failed write is done
// again), and waits for them. It returns when the last write ended.
func (l *load) run(n int, until time.Duration, backlog int64) time.Duration {
	var (
		wg   sync.WaitGroup
		left atomic.Int64
		last atomic.Int64
	)
	left.Store(backlog)
	end := l.start.Add(until)
	ctx := context.Background()
	for range n {
		wg.Go(func() {
			for {
				if backlog > 0 {
					if left.Add(-1) < 0 {
						return
					}
				} else if !time.Now().Before(end) {
					return
				}
				for l.one(ctx) != nil && backlog > 0 {
				}
				last.Store(int64(time.Since(l.start)))
			}
		})
	}
	wg.Wait()
	return time.Duration(last.Load())
}

// report returns the spans as a table, for failure messages and logs.
func (l *load) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, s := range l.spans {
		from := time.Duration(i) * l.window
		fmt.Fprintf(&b, "%5v: %6d written, %4d timed out, %4d throttled, peak %4d in flight, limit %d-%d\n",
			from, s.written, s.timedOut, s.throttled, s.peak, s.limitLow, s.limitHigh)
	}
	return b.String()
}
