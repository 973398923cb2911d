// Package sim holds the simulations behind cmd/retrysim: a discrete-event
// engine in virtual time, the contention study of Marc Brooker's "Exponential
// Backoff And Jitter" (AWS Architecture Blog, 2015), and the outage drill of
// the design notes (the hedging study is its subpackage hedging). They drive
// the library's real Backoff values, Next, limiters and Budget, passing them
// the virtual time as an argument, so a run takes no wall-clock time beyond
// the computation and is reproducible from its seed.
package sim

import (
	"math"
	"time"
)

// Queue is the discrete-event engine: a priority queue of events of type E,
// each due at a virtual time, popped in time order. Events due at the same
// time come out in the order they were scheduled, so a run depends only on
// its inputs and its seed, never on the heap's layout.
//
// Virtual time is a time.Duration since the start of the run. The zero value
// is an empty queue at time 0. A Queue is not safe for concurrent use; a
// simulation runs on one goroutine, and parallel runs use one Queue each.
type Queue[E any] struct {
	now   time.Duration
	seq   uint64
	items []entry[E]
	// hole is true when Pop has taken the root out of items[0] but left the
	// slot for the next Schedule: a model usually schedules one event for
	// each it pops, and filling the root and sifting it down once costs half
	// of removing the root and adding the new event separately.
	hole bool
}

type entry[E any] struct {
	at  time.Duration
	seq uint64
	ev  E
}

// less orders entries by time, then by scheduling order.
func (a *entry[E]) less(b *entry[E]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// Now returns the virtual time: the due time of the event popped last.
func (q *Queue[E]) Now() time.Duration { return q.now }

// Len returns the number of events waiting.
func (q *Queue[E]) Len() int {
	if q.hole {
		return len(q.items) - 1
	}
	return len(q.items)
}

// Schedule adds ev, due at virtual time at. It panics if at is before Now:
// an event in the past is a bug in the model, and silently running it late
// would hide it.
func (q *Queue[E]) Schedule(at time.Duration, ev E) {
	if at < q.now {
		panic("sim: event scheduled at " + at.String() + ", before now " + q.now.String())
	}
	e := entry[E]{at: at, seq: q.seq, ev: ev}
	q.seq++
	if q.hole {
		q.hole = false
		q.items[0] = e
		q.down(0)
		return
	}
	q.items = append(q.items, e)
	q.up(len(q.items) - 1)
}

// After adds ev, due d after Now; a negative d counts as 0, and a time past
// the largest Duration counts as the largest.
func (q *Queue[E]) After(d time.Duration, ev E) {
	at := q.now + max(d, 0)
	if at < q.now {
		at = math.MaxInt64
	}
	q.Schedule(at, ev)
}

// Peek returns the due time of the earliest event, without removing it;
// ok is false if the queue is empty.
func (q *Queue[E]) Peek() (at time.Duration, ok bool) {
	if q.hole {
		q.fill()
	}
	if len(q.items) == 0 {
		return 0, false
	}
	return q.items[0].at, true
}

// Pop removes the earliest event, advances Now to its due time and returns
// it; ok is false if the queue is empty, and then Now does not change.
func (q *Queue[E]) Pop() (ev E, ok bool) {
	if q.hole {
		q.fill()
	}
	if len(q.items) == 0 {
		return ev, false
	}
	top := q.items[0]
	q.items[0] = entry[E]{} // drop references held by E
	q.hole = true
	q.now = top.at
	return top.ev, true
}

// fill closes the hole at the root with the last entry.
func (q *Queue[E]) fill() {
	q.hole = false
	n := len(q.items) - 1
	q.items[0] = q.items[n]
	q.items[n] = entry[E]{}
	q.items = q.items[:n]
	if n > 1 {
		q.down(0)
	}
}

// Reset empties the queue and sets Now back to 0, keeping the memory.
func (q *Queue[E]) Reset() {
	clear(q.items)
	q.items = q.items[:0]
	q.now, q.seq, q.hole = 0, 0, false
}

// up and down sift an entry in a 4-ary heap, written out rather than
// through container/heap, whose interface would box every event. Four
// children per node halve the depth of a binary heap; the queues here hold
// one event per simulated client or job, so the depth is what costs.
func (q *Queue[E]) up(i int) {
	e := q.items[i]
	for i > 0 {
		parent := (i - 1) / 4
		if !e.less(&q.items[parent]) {
			break
		}
		q.items[i] = q.items[parent]
		i = parent
	}
	q.items[i] = e
}

func (q *Queue[E]) down(i int) {
	items := q.items
	n := len(items)
	e := items[i]
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		least := first
		for c := first + 1; c < min(first+4, n); c++ {
			if items[c].less(&items[least]) {
				least = c
			}
		}
		if !items[least].less(&e) {
			break
		}
		items[i] = items[least]
		i = least
	}
	items[i] = e
}
