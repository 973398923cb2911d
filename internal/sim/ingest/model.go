// Package ingest is retrysim's ingestion-pipeline study in virtual time: a
// storage outage leaves a backlog of writes, and the pipeline's writers,
// each a call under a retry.Policy, drain it once the storage is back. The
// storage serves a number of writes at once at its base latency; above
// that, writes queue, first come first served, and their latency grows with
// the queue until they time out (model.go, Storage). The study (study.go)
// compares no bound on the load, a rate limit alone, fixed concurrency
// limits (a sweep, from which the best is chosen in hindsight), an adaptive
// concurrency limit, and the adaptive limit with a circuit breaker; and
// the same when the storage's capacity halves or doubles mid-run.
//
// Runs are exact and seeded: the same Config gives the same Result on any
// machine. The library's own parts make the decisions, given the virtual
// time: retry.Next after each failure, the Policy's Limiter (a
// sim.VirtualLimiter), its Concurrency's count of slots and what it learns
// from each release, and its Breaker's Until, Allow and done.
package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
)

// Storage is the model of the storage the pipeline writes to.
//
//   - Until Outage it is down and says so at once: every write is refused
//     (ECONNREFUSED), holding nothing.
//   - Then it serves Slots writes at once, each for a time drawn uniformly
//     from [WorkMin, WorkMax]; a write that finds every slot taken waits,
//     first come first served, with no bound: above Slots, a write's latency
//     is its wait in that queue and its work, so it grows with the queue.
//   - A client that times out goes away, but nothing tells the storage: it
//     still does the write when its turn comes (wasted work), and the write
//     is stored, though the client does not know it. A write is
//     idempotent, so the retry that follows stores nothing twice.
//   - At ChangeAt (when not zero) Slots becomes ChangedSlots: fewer slots
//     let the writes in service finish and take no new one until below
//     the new count; more take writes from the queue at once.
type Storage struct {
	Slots            int
	WorkMin, WorkMax time.Duration
	Outage           time.Duration
	ChangeAt         time.Duration
	ChangedSlots     int
}

// Capacity returns the writes a second the storage serves with slots
// slots, at its mean work time.
func (s Storage) Capacity(slots int) float64 {
	return float64(slots) / ((s.WorkMin + s.WorkMax) / 2).Seconds()
}

// SlotsAt returns the storage's slot count at virtual time t.
func (s Storage) SlotsAt(t time.Duration) int {
	if s.ChangeAt > 0 && t >= s.ChangeAt {
		return s.ChangedSlots
	}
	return s.Slots
}

// Slots is a retry.Concurrency the model can drive in virtual time: one
// that says how many slots it has and how many are taken, and whose
// Acquire, while one is free and nobody waits, returns at once without
// reading the clock. The model keeps the waiting attempts in its own first
// come, first served queue, in virtual time, and asks for a slot only for
// the attempt at its head: through TryAcquire when the Slots has one
// (adaptive.Concurrency, whose limit may admit fewer than Limit while it
// measures), otherwise through Acquire once InFlight is below Limit
// (retry.ConcurrencyLimit). The release, given the attempt's virtual
// duration, is the Concurrency's own, and what it learns from.
type Slots interface {
	retry.Concurrency
	Limit() int
	InFlight() int
	Waiting() int
}

// tryAcquirer is a Concurrency that can take a slot without waiting.
type tryAcquirer interface {
	TryAcquire() (release func(time.Duration, error), ok bool)
}

// Config is one run: Writes writes arrive evenly over [0, Arrival) in the
// pipeline's queue, and Writers writers take them in order, one at a time,
// each storing its write by calls under Policy, against Storage: a writer
// takes the next write once the storage has answered its last one's
// success. The Policy's Limiter,
// Concurrency and Breaker hold state, so a Config runs once; build a fresh
// one (Variants, FixedLimit) for each run.
//
// Policy.Concurrency, if set, must be a [Slots]; Policy.Limiter, if set, is
// booked when an attempt comes due, and the attempt goes out after the
// booking's delay. A call that the Breaker stops (at an attempt, or when
// the retry it plans would come before the breaker lets one through) is
// put back by the pipeline for the time the breaker names, as a new call:
// a queue does that with work it cannot do yet.
type Config struct {
	Name string
	// Change says, for a reader, what bounds the load in this variant.
	Change  string
	Writes  int
	Writers int
	Arrival time.Duration
	Storage Storage
	Policy  retry.Policy
	Seed    uint64
	// Horizon ends a run that has not drained by then; its Drained is
	// false. 0 means 10 minutes.
	Horizon time.Duration

	// Work, if set, is the storage's work for writer w's attempt k (from
	// 0, over the whole run), and Draw the uniform draw in [0, 1) that
	// retry.Next is given for writer w's failure k: draws that do not
	// depend on the order in which the run makes them, so that a run of
	// the same writers through retry.Do, on goroutines, draws the same
	// (TestModelMatchesTheCore). Nil: both come from one source seeded by
	// Seed, in the run's order.
	Work func(w, k int) time.Duration
	Draw func(w, k int) float64

	// Trace asks for every attempt in Result.Trace.
	Trace bool
}

// AttemptTrace is one attempt of a traced run: writer W's attempt K (from
// 0, over the run), sent at Sent and answered at End (End = Sent for one
// refused in the outage), with OK when it stored its write.
type AttemptTrace struct {
	W, K      int
	Sent, End time.Duration
	OK        bool
}

// Result is the outcome of one run.
type Result struct {
	Name   string
	Writes int
	Stored int // writes whose client learned they were stored
	// Drained is whether every write was stored before the Horizon; Done is
	// when the last one was (or the Horizon).
	Drained bool
	Done    time.Duration
	Outage  time.Duration
	// Attempts is every attempt sent to the storage; InOutage those sent
	// while it was down; TimedOut those whose client gave up at the
	// AttemptTimeout, whose work the storage did anyway, or will.
	Attempts, InOutage, TimedOut int
	// Refused is the attempts the breaker refused, and Stopped the calls
	// it stopped, put back for later.
	Refused, Stopped int
	// Latencies are the attempts' latencies once the storage was back, as
	// their clients saw them: the answer's time, or the timeout.
	Latencies []time.Duration
	// Peak is the most writes the storage held at once, in service and
	// queued, abandoned ones included.
	Peak int
	// Trace, in bins of TraceBin: the most writes the storage held in each,
	// the writes stored (answered to their clients) in each, and the
	// concurrency limit at the end of each (0 with no Concurrency).
	HeldPeak, StoredIn, LimitAt []int
	// Trace is every attempt, in the order they were answered, when
	// Config.Trace asks for it.
	Trace []AttemptTrace
}

// TraceBin is the width of the bins of Result's traces.
const TraceBin = 100 * time.Millisecond

// Drain returns the time from the storage's return to the last write
// stored.
func (r *Result) Drain() time.Duration { return r.Done - r.Outage }

// Quantile returns the nearest-rank quantile q of the attempt latencies.
func (r *Result) Quantile(q float64) time.Duration { return sim.Percentile(r.Latencies, q) }

// The errors a writer sees.
var (
	errRefused    = fmt.Errorf("storage: connection refused: %w", syscall.ECONNREFUSED)
	errTimeout    = fmt.Errorf("storage: no answer within the attempt timeout: %w", context.DeadlineExceeded)
	errBreakerCut = fmt.Errorf("ingest: the breaker refused the attempt: %w", context.Canceled)
)

// Kinds of event.
const (
	evArrive  uint8 = iota // a write arrives in the pipeline's queue
	evDue                  // a writer's attempt is planned for now
	evAdmit                // its limiter booking has come: it asks for a slot
	evDone                 // the storage has done an attempt's write
	evTimeout              // an attempt's timeout
	evChange               // the storage's slot count changes
)

type event struct {
	kind uint8
	id   int32 // evDue, evAdmit: the writer; evDone, evTimeout: the attempt
}

// attempt is one attempt in flight.
type attempt struct {
	writer   int32
	k        int32 // the writer's attempt number over the run, from 0
	sent     time.Duration
	answered bool
	release  func(time.Duration, error)
	done     func(time.Time, error)
}

// writer is one writer's call state.
type writer struct {
	n    int           // attempts in the current call
	prev time.Duration // the call's last wait
}

// epoch is virtual time 0 as a time.Time.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs c in virtual time and returns its outcome.
func Run(c Config) Result {
	p := c.Policy
	st := c.Storage
	horizon := c.Horizon
	if horizon <= 0 {
		horizon = 10 * time.Minute
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x1a9e57))
	var slots Slots
	if p.Concurrency != nil {
		slots = p.Concurrency.(Slots)
	}
	res := Result{Name: c.Name, Writes: c.Writes, Outage: st.Outage}
	var (
		q        sim.Queue[event]
		writers  = make([]writer, c.Writers)
		idle     []int32 // writers with no write, in the order they became idle
		queued   int     // writes arrived that no writer has taken
		arrived  int
		attempts []attempt
		waiting  []int32 // writes waiting for a slot, in arrival order
		queue    []int32 // attempts the storage holds that wait for a slot
		busy     int     // the storage's slots taken
		held     int     // busy + len(queue)
		answer   func(id int32, err error)
		sentBy   = make([]int32, c.Writers) // attempts each writer has sent
		failedBy = make([]int, c.Writers)   // failures each writer has had
	)
	bin := func(t time.Duration) int { return int(t / TraceBin) }
	mark := func(now time.Duration) {
		k := bin(now)
		for len(res.HeldPeak) <= k {
			res.HeldPeak = append(res.HeldPeak, 0)
			res.StoredIn = append(res.StoredIn, 0)
			res.LimitAt = append(res.LimitAt, 0)
		}
		res.HeldPeak[k] = max(res.HeldPeak[k], held)
		if slots != nil {
			res.LimitAt[k] = slots.Limit()
		}
		res.Peak = max(res.Peak, held)
	}
	work := func(id int32) time.Duration {
		if c.Work != nil {
			return c.Work(int(attempts[id].writer), int(attempts[id].k))
		}
		return st.WorkMin + time.Duration(rng.Float64()*float64(st.WorkMax-st.WorkMin))
	}
	draw := func(w int32) float64 {
		if c.Draw != nil {
			failedBy[w]++
			return c.Draw(int(w), failedBy[w]-1)
		}
		return rng.Float64()
	}
	serve := func() {
		for len(queue) > 0 && busy < st.SlotsAt(q.Now()) {
			a := queue[0]
			queue = queue[1:]
			busy++
			q.After(work(a), event{kind: evDone, id: a})
		}
	}
	// putBack ends writer w's current call, stopped by the breaker, and
	// plans a new one for until.
	putBack := func(w int32, until time.Duration) {
		res.Stopped++
		writers[w] = writer{}
		q.Schedule(max(until, q.Now()), event{kind: evDue, id: w})
	}
	// start sends writer w's attempt, its slot, if any, taken.
	start := func(w int32, release func(time.Duration, error)) {
		now := q.Now()
		t := epoch.Add(now)
		var done func(time.Time, error)
		if p.Breaker != nil {
			var until time.Time
			if done, until = p.Breaker.Allow(t); done == nil {
				res.Refused++
				if release != nil {
					release(0, errBreakerCut)
				}
				putBack(w, until.Sub(epoch))
				return
			}
		}
		writers[w].n++
		res.Attempts++
		id := int32(len(attempts))
		attempts = append(attempts, attempt{writer: w, k: sentBy[w], sent: now, release: release, done: done})
		sentBy[w]++
		if now < st.Outage {
			res.InOutage++
			answer(id, errRefused)
			return
		}
		held++
		if busy < st.SlotsAt(now) {
			busy++
			q.After(work(id), event{kind: evDone, id: id})
		} else {
			queue = append(queue, id)
		}
		if p.AttemptTimeout > 0 {
			q.After(p.AttemptTimeout, event{kind: evTimeout, id: id})
		}
		mark(now)
	}
	// try takes a slot if one is free, without waiting.
	try := func() (func(time.Duration, error), bool) {
		if t, ok := slots.(tryAcquirer); ok {
			return t.TryAcquire()
		}
		if slots.InFlight() >= slots.Limit() || slots.Waiting() > 0 {
			return nil, false
		}
		release, err := slots.Acquire(context.Background(), time.Time{})
		if err != nil {
			panic("ingest: Acquire refused a free slot: " + err.Error())
		}
		return release, true
	}
	// admit gives writer w a slot, or queues it for one.
	admit := func(w int32) {
		if slots == nil {
			start(w, nil)
			return
		}
		if len(waiting) == 0 {
			if release, ok := try(); ok {
				start(w, release)
				return
			}
		}
		waiting = append(waiting, w)
	}
	// handOn gives the slots free now to the longest waiters.
	handOn := func() {
		for len(waiting) > 0 {
			release, ok := try()
			if !ok {
				return
			}
			w := waiting[0]
			waiting = waiting[1:]
			start(w, release)
		}
	}
	// answer ends attempt id with err (nil: stored) and decides what next.
	answer = func(id int32, err error) {
		now := q.Now()
		t := epoch.Add(now)
		a := &attempts[id]
		a.answered = true
		d := now - a.sent
		if c.Trace {
			res.Trace = append(res.Trace, AttemptTrace{W: int(a.writer), K: int(a.k), Sent: a.sent, End: now, OK: err == nil})
		}
		if now >= st.Outage && a.sent >= st.Outage {
			res.Latencies = append(res.Latencies, d)
		}
		if a.done != nil {
			a.done(t, err)
		}
		if a.release != nil {
			a.release(d, err)
			a.release = nil
		}
		w := a.writer
		if err == nil {
			res.Stored++
			res.Done = now
			res.StoredIn[bin(now)]++
			writers[w] = writer{}
			if queued > 0 {
				queued--
				q.Schedule(now, event{kind: evDue, id: w})
			} else {
				idle = append(idle, w)
			}
		} else {
			wait, stop := retry.Next(p, writers[w].n, writers[w].prev, err, t, time.Time{}, draw(w))
			if stop != nil {
				panic("ingest: the policy gave up on a write: " + stop.Error())
			}
			next := now + wait
			var until time.Time
			if p.Breaker != nil {
				until = p.Breaker.Until(epoch.Add(next))
			}
			if !until.IsZero() {
				putBack(w, until.Sub(epoch)) // the retry would be refused: stop at once
			} else {
				writers[w].prev = wait
				q.Schedule(next, event{kind: evDue, id: w})
			}
		}
		if slots != nil {
			handOn()
		}
	}

	for i := range c.Writers {
		idle = append(idle, int32(i))
	}
	arrive := func() {
		if arrived < c.Writes {
			q.Schedule(time.Duration(int64(arrived)*int64(c.Arrival)/int64(c.Writes)), event{kind: evArrive})
			arrived++
		}
	}
	arrive()
	if st.ChangeAt > 0 {
		q.Schedule(st.ChangeAt, event{kind: evChange})
	}
	for res.Stored < c.Writes {
		ev, ok := q.Pop()
		if !ok || q.Now() > horizon {
			break
		}
		now := q.Now()
		t := epoch.Add(now)
		switch ev.kind {
		case evArrive:
			arrive()
			if len(idle) > 0 {
				w := idle[0]
				idle = idle[1:]
				q.Schedule(now, event{kind: evDue, id: w})
			} else {
				queued++
			}
		case evDue:
			if p.Breaker != nil {
				if until := p.Breaker.Until(t); !until.IsZero() {
					putBack(ev.id, until.Sub(epoch))
					continue
				}
			}
			if p.Limiter != nil {
				r, err := p.Limiter.Reserve(context.Background(), t)
				if err != nil {
					panic("ingest: the limiter refused a booking: " + err.Error())
				}
				q.Schedule(max(r.Start.Sub(epoch), now), event{kind: evAdmit, id: ev.id})
				continue
			}
			admit(ev.id)
		case evAdmit:
			admit(ev.id)
		case evDone:
			busy--
			held--
			a := &attempts[ev.id]
			serve()
			mark(now)
			if !a.answered {
				answer(ev.id, nil)
			}
		case evTimeout:
			if !attempts[ev.id].answered {
				res.TimedOut++
				answer(ev.id, errTimeout)
			}
		case evChange:
			serve()
		}
	}
	slices.Sort(res.Latencies)
	res.Drained = res.Stored == c.Writes
	if !res.Drained {
		res.Done = horizon
	}
	return res
}
