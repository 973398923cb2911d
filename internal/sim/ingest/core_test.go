package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim/ingest"
)

// hash01 is a uniform draw in [0, 1) that depends only on its arguments.
func hash01(seed uint64, w, k int) float64 {
	h := seed*0x9E3779B97F4A7C15 ^ uint64(w)*0xC2B2AE3D27D4EB4F ^ uint64(k)*0x165667B19E3779F9
	h ^= h >> 33
	h *= 0xFF51AFD7ED558CCD
	h ^= h >> 33
	h *= 0xC4CEB9FE1A85EC53
	h ^= h >> 33
	return float64(h>>11) / (1 << 53)
}

// keyed gives c draws that depend on the writer and the attempt or
// failure alone, not on the order in which they are made, so that the
// core, whose writers run on goroutines, draws the same as the model.
func keyed(c ingest.Config) ingest.Config {
	st := c.Storage
	c.Work = func(w, k int) time.Duration {
		return st.WorkMin + time.Duration(hash01(c.Seed, w, k)*float64(st.WorkMax-st.WorkMin))
	}
	c.Draw = func(w, k int) float64 { return hash01(c.Seed+1, w, k) }
	return c
}

// instant runs what the bubble's goroutines defer to it, at the virtual
// instant they do, one action at a time in the order of their keys, each
// once every other goroutine has gone as far as it can (synctest.Wait).
// The model takes what happens at one instant in the order of its event
// queue; goroutines would take it in the order the scheduler runs them.
// Two kinds of tie are structural: a release that lets an adaptive limit
// grow hands out several slots at once, whose writes reach the storage
// together; and every call the breaker stops sleeps until the same time,
// when the breaker lets one probe through. instant takes the first in the
// order the slots were asked for, the second in the order the calls were
// stopped, as the model does.
//
// That order of the stops is itself a tie: an attempt's end whose news
// opens the breaker (a timeout, say) gives its slot to the longest waiter,
// which the breaker refuses, and which gives the slot on to the next, and
// so on, each on its own goroutine, all stopped at that one instant beside
// the call whose attempt ended. The model puts back that call first (its
// answer plans its retry before it hands the slot on), then the waiters in
// the order they came due (its queue of them). So a stop is numbered here,
// once the instant's goroutines have gone as far as they can, in that
// order (classStop, with the key stopKey gives).
type instant struct {
	mu      sync.Mutex
	pending []deferred
	kick    chan struct{}
}

// The classes of deferred actions, in the order instant takes them.
const (
	classStop    = iota // a stopped call is numbered, for its wake-up's order
	classSlot           // an attempt given a slot goes on (orderedSlots)
	classArrive         // a write reaches the storage
	classWake           // a stopped call is made again
	classTimeout        // an attempt's timeout is seen
)

// deferred is one action: class first, then seq.
type deferred struct {
	class int
	seq   uint64
	run   func()
}

func newInstant() *instant { return &instant{kick: make(chan struct{}, 1)} }

// later defers run to the end of the instant.
func (in *instant) later(class int, seq uint64, run func()) {
	in.mu.Lock()
	in.pending = append(in.pending, deferred{class, seq, run})
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// loop runs the deferred actions until stop is closed. It is the only
// goroutine of the bubble that calls synctest.Wait.
func (in *instant) loop(stop <-chan struct{}) {
	for {
		select {
		case <-in.kick:
		case <-stop:
			return
		}
		for {
			synctest.Wait()
			in.mu.Lock()
			if len(in.pending) == 0 {
				in.mu.Unlock()
				break
			}
			i := 0
			for j, d := range in.pending {
				if d.class < in.pending[i].class || (d.class == in.pending[i].class && d.seq < in.pending[i].seq) {
					i = j
				}
			}
			d := in.pending[i]
			in.pending = slices.Delete(in.pending, i, i+1)
			in.mu.Unlock()
			d.run()
		}
	}
}

// coreStorage is ingest.Storage for goroutines in a synctest bubble: Slots
// writes served at once, each for the Config's Work, the rest queued,
// first come first served, unbounded; a write whose client has gone is
// still done in its turn. Safe for concurrent use.
type coreStorage struct {
	st    ingest.Storage
	work  func(w, k int) time.Duration
	start time.Time
	at    *instant

	mu    sync.Mutex
	busy  int
	queue []*coreWrite
	held  int
	peak  int
}

// coreWrite is one write the storage holds; done is closed once it is
// stored.
type coreWrite struct {
	w, k int
	done chan struct{}
}

var errRefused = fmt.Errorf("storage: connection refused: %w", syscall.ECONNREFUSED)

// write is writer w's attempt k, seq-th in the order of the starts:
// refused in the outage, otherwise held until stored or until ctx ends.
func (s *coreStorage) write(ctx context.Context, w, k int, seq uint64) error {
	if time.Since(s.start) < s.st.Outage {
		return errRefused
	}
	wr := &coreWrite{w: w, k: k, done: make(chan struct{})}
	s.at.later(classArrive, seq, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.held++
		s.peak = max(s.peak, s.held)
		s.queue = append(s.queue, wr)
		s.fill()
	})
	select {
	case <-wr.done:
		return nil
	case <-ctx.Done():
		// Timed out: after the others that did at this instant and started
		// before it, as the model's timeouts are in the order of the starts.
		cut := make(chan struct{})
		s.at.later(classTimeout, seq, func() { close(cut) })
		<-cut
		return ctx.Err()
	}
}

// serve does wr's work, then takes the next writes from the queue. s.mu
// is held.
func (s *coreStorage) serve(wr *coreWrite) {
	time.AfterFunc(s.work(wr.w, wr.k), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.busy--
		s.held--
		close(wr.done)
		s.fill()
	})
}

// fill takes writes from the queue while a slot is free. s.mu is held.
func (s *coreStorage) fill() {
	for len(s.queue) > 0 && s.busy < s.st.SlotsAt(time.Since(s.start)) {
		wr := s.queue[0]
		s.queue = s.queue[1:]
		s.busy++
		s.serve(wr)
	}
}

// writerKey is the context key of a writer's *asked, the order in which
// its attempt asked for a slot.
type writerKey struct{}

// orderedSlots is a Concurrency that notes, for the storage, the order in
// which attempts ask it for a slot, and lets an attempt go on with the
// slot it was given only once the instant has settled, in that order
// (classSlot): a release that hands out several slots at once wakes their
// waiters together, and the breaker, half-open, lets through whichever of
// them asks first, where the model's queue hands them on, and asks the
// breaker, one at a time in the order they asked.
type orderedSlots struct {
	retry.Concurrency
	asks *atomic.Uint64
	at   *instant
}

func (o orderedSlots) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	a, ok := ctx.Value(writerKey{}).(*uint64)
	if !ok {
		return o.Concurrency.Acquire(ctx, by)
	}
	asked := o.asks.Add(1)
	*a = asked
	release, err := o.Concurrency.Acquire(ctx, by)
	if err == nil {
		given := make(chan struct{})
		o.at.later(classSlot, asked, func() { close(given) })
		<-given
	}
	return release, err
}

// dueCtx is a writer's context, which notes in due the order of the last
// time the loop asked it whether it had ended (Err): the loop asks as an
// attempt comes due, before it asks for a slot (begin, readyToStart), and
// again only after the attempt has started or the call has stopped, so
// that a call waiting for a slot has its due's number there (an
// adaptive.Concurrency asks too as it queues the call, in the queue's
// order). dues counts the asks of every writer.
type dueCtx struct {
	context.Context
	due, dues *atomic.Uint64
}

func (c dueCtx) Err() error {
	c.due.Store(c.dues.Add(1))
	return c.Context.Err()
}

// stopKey is the key of a stop's number (classStop) in the model's order:
// 0 for the call whose own attempt failed at this instant (the model puts
// it back as it plans its retry, before it hands its slot on; a retry
// never follows at once, so such a call stops at the failure), and
// otherwise due, the order in which the call's attempt came due: a call
// handed a slot that the breaker refused, in the order of the slot's
// queue, or one that comes due now.
func stopKey(failedNow bool, due uint64) uint64 {
	if failedNow {
		return 0
	}
	return due
}

// runCore runs c's writers through retry.Do in a synctest bubble, one
// goroutine each, against a coreStorage, and returns what the model's
// Result counts. A call the breaker stops is made again at the time the
// breaker names, as the model puts it back.
func runCore(t *testing.T, c ingest.Config) ingest.Result {
	res := ingest.Result{Name: c.Name, Writes: c.Writes, Outage: c.Storage.Outage}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		at := newInstant()
		s := &coreStorage{st: c.Storage, work: c.Work, start: start, at: at}
		if s.st.ChangeAt > 0 {
			time.AfterFunc(s.st.ChangeAt, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.fill()
			})
		}
		var asks, stops, starts, dues atomic.Uint64
		ordered := false
		if _, fixed := c.Policy.Concurrency.(*retry.ConcurrencyLimit); c.Policy.Concurrency != nil && !fixed {
			ordered = true
			// Not a ConcurrencyLimit, whose own type the loop looks for:
			// its one slot per release needs no order.
			c.Policy.Concurrency = orderedSlots{c.Policy.Concurrency, &asks, at}
		}
		var mu sync.Mutex // guards res
		writes := make(chan int, c.Writes)
		finished := make(chan struct{})
		var left atomic.Int64
		left.Store(int64(c.Writers))
		for w := range c.Writers {
			sent, failed := 0, 0
			var asked uint64
			due := new(atomic.Uint64)
			ctx := dueCtx{context.WithValue(t.Context(), writerKey{}, &asked), due, &dues}
			failedAt := time.Duration(-1) // when the writer's last attempt failed; -1 if it did not
			p := c.Policy
			p.Rand = func() float64 { failed++; return c.Draw(w, failed-1) } // one draw per failure, as retry.Next is given
			fn := func(ctx context.Context) error {
				k := sent
				sent++
				began := time.Since(start)
				// The order of the starts: that of the slots asked for when
				// several are given at once; otherwise the order in which
				// the attempts start, one at a time at any instant.
				seq := asked
				if !ordered {
					seq = starts.Add(1)
				}
				err := s.write(ctx, w, k, seq)
				end := time.Since(start)
				failedAt = -1
				if err != nil {
					failedAt = end
				}
				mu.Lock()
				defer mu.Unlock()
				res.Trace = append(res.Trace, ingest.AttemptTrace{W: w, K: k, Sent: began, End: end, OK: err == nil})
				res.Attempts++
				switch {
				case began < c.Storage.Outage:
					res.InOutage++
				default:
					res.Latencies = append(res.Latencies, end-began)
					if err != nil {
						res.TimedOut++
					}
				}
				return err
			}
			go func() {
				defer func() {
					if left.Add(-1) == 0 {
						close(finished)
					}
				}()
				for range writes {
					for {
						err := retry.Do(ctx, fn, p)
						if err == nil {
							mu.Lock()
							res.Stored++
							res.Done = time.Since(start)
							mu.Unlock()
							break
						}
						var open interface{ Until() time.Time }
						var re *retry.Error
						if !errors.As(err, &re) || !errors.Is(re.Reason, retry.ErrBreakerOpen) || !errors.As(re.Reason, &open) {
							t.Errorf("writer %d: %v", w, err)
							return
						}
						var seq uint64
						numbered := make(chan struct{})
						at.later(classStop, stopKey(failedAt == time.Since(start), due.Load()), func() {
							seq = stops.Add(1)
							close(numbered)
						})
						<-numbered
						mu.Lock()
						res.Stopped++
						mu.Unlock()
						time.Sleep(time.Until(open.Until()))
						woken := make(chan struct{})
						at.later(classWake, seq, func() { close(woken) })
						<-woken
					}
				}
			}()
			synctest.Wait() // writer w waits for a write before writer w+1 does: the model's order of idle writers
		}
		stop := make(chan struct{})
		go at.loop(stop)
		for i := range c.Writes {
			time.Sleep(time.Until(start.Add(time.Duration(int64(i) * int64(c.Arrival) / int64(c.Writes)))))
			writes <- i
		}
		close(writes)
		<-finished
		close(stop)
		res.Peak = s.peak
	})
	slices.Sort(res.Latencies)
	res.Drained = res.Stored == c.Writes
	return res
}

// compareIngest is one scenario of the comparison.
type compareIngest struct {
	name   string
	config func() ingest.Config // fresh state (Concurrency, Breaker) for each run
}

// smallStorage is a storage of C = 8 slots, down for the first 2 s.
func smallStorage() ingest.Storage {
	return ingest.Storage{Slots: 8, WorkMin: 40 * time.Millisecond, WorkMax: 60 * time.Millisecond, Outage: 2 * time.Second}
}

// smallConfig is a few hundred writes arriving over the outage, for 40
// writers under the study's policy with bound. 293 writes over 2 s put no
// two arrivals a whole number of seconds apart, a breaker's OpenFor or
// its half-open wait: a call put back until the breaker's time then never
// meets an arrival at that instant.
func smallConfig(name string, st ingest.Storage, bound func(*retry.Policy)) func() ingest.Config {
	return func() ingest.Config {
		c := ingest.Config{Name: name, Writes: 293, Writers: 40, Arrival: st.Outage, Storage: st, Policy: ingest.Policy(), Seed: 3, Horizon: time.Minute}
		bound(&c.Policy)
		return keyed(c)
	}
}

var compareIngests = []compareIngest{
	{"no bound", smallConfig("no bound", smallStorage(), func(*retry.Policy) {})},
	{"fixed limit of C", smallConfig("fixed 8", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &retry.ConcurrencyLimit{Slots: 8}
	})},
	{"fixed limit of 3C, timeouts", smallConfig("fixed 24", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &retry.ConcurrencyLimit{Slots: 24}
		p.AttemptTimeout = 120 * time.Millisecond
	})},
	{"adaptive limit", smallConfig("adaptive", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &adaptive.Concurrency{}
	})},
	{"adaptive limit, C halves", smallConfig("adaptive, halves", func() ingest.Storage {
		st := smallStorage()
		st.ChangeAt, st.ChangedSlots = 3*time.Second, 4
		return st
	}(), func(p *retry.Policy) {
		p.Concurrency = &adaptive.Concurrency{}
	})},
	{"adaptive limit and breaker", smallConfig("adaptive + breaker", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &adaptive.Concurrency{}
		p.Breaker = &retry.CircuitBreaker{}
	})},
	{"fixed limit of 3C and breaker, timeouts", smallConfig("fixed 24 + breaker", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &retry.ConcurrencyLimit{Slots: 24}
		p.Breaker = &retry.CircuitBreaker{OpenFor: time.Second, MinAttempts: 10, Window: time.Second}
		p.AttemptTimeout = 120 * time.Millisecond
	})},
	{"adaptive limit and breaker, timeouts", smallConfig("adaptive + breaker, timeouts", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &adaptive.Concurrency{InitialLimit: 30}
		p.Breaker = &retry.CircuitBreaker{OpenFor: time.Second, MinAttempts: 10, Window: time.Second}
		p.AttemptTimeout = 90 * time.Millisecond
	})},
	{"fixed limit and breaker", smallConfig("fixed + breaker", smallStorage(), func(p *retry.Policy) {
		p.Concurrency = &retry.ConcurrencyLimit{Slots: 8}
		p.Breaker = &retry.CircuitBreaker{OpenFor: time.Second}
	})},
}

// TestModelMatchesTheCore runs small scenarios (293 writes, 40 writers,
// C = 8, a 2 s outage) through the model and through retry.Do in a
// synctest bubble, against the same storage, and compares every attempt
// (its writer, number, send and answer times, outcome) and every figure
// the study reports. The tolerance is 0: both run on exact clocks, each
// draw depends only on the writer and its attempt or failure (keyed), the
// work times and waits are drawn to the nanosecond, and the ties that the
// bounds themselves make are taken in the model's order (see instant).
// Any difference is a rule the model gets wrong, or the core.
//
// Not compared: the rate limit. The model books a virtual limiter when an
// attempt comes due; the core books retry.RateLimiter when it plans the
// retry, at the current time with a Slack, so their pacing differs by
// design, not by a rule either gets wrong.
func TestModelMatchesTheCore(t *testing.T) {
	t.Parallel()
	for _, sc := range compareIngests {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c := sc.config()
			c.Trace = true
			model := ingest.Run(c)
			core := runCore(t, sc.config())
			require.True(t, model.Drained, "the model drains")
			if w, k, ok := firstDifference(core.Trace, model.Trace); ok {
				t.Errorf("writer %d's attempt %d is the first to differ:\n core: %s\nmodel: %s", w, k,
					around(core.Trace, w, k), around(model.Trace, w, k))
			}
			assert.Equal(t, figures(core), figures(model), "core, then model")
			t.Logf("model: %v", figures(model))
		})
	}
}

// figures are the Result's figures the study reports, and those the
// comparison adds.
func figures(r ingest.Result) map[string]any {
	return map[string]any{
		"stored": r.Stored, "drained": r.Drained, "drain": r.Drain(), "peak": r.Peak,
		"p50": r.Quantile(0.5), "p99": r.Quantile(0.99), "latencies": len(r.Latencies),
		"timed out": r.TimedOut, "attempts": r.Attempts, "in the outage": r.InOutage, "stopped": r.Stopped,
	}
}

// firstDifference returns the writer and attempt of the earliest-sent
// attempt that the two traces do not have alike; ok is false if they
// agree.
func firstDifference(core, model []ingest.AttemptTrace) (w, k int, ok bool) {
	type key struct{ w, k int }
	of := func(tr []ingest.AttemptTrace) map[key]ingest.AttemptTrace {
		m := map[key]ingest.AttemptTrace{}
		for _, a := range tr {
			m[key{a.W, a.K}] = a
		}
		return m
	}
	c, m := of(core), of(model)
	first := ingest.AttemptTrace{Sent: -1}
	check := func(a ingest.AttemptTrace, other map[key]ingest.AttemptTrace) {
		if b, found := other[key{a.W, a.K}]; !found || b != a {
			if first.Sent < 0 || a.Sent < first.Sent {
				first = a
			}
		}
	}
	for _, a := range core {
		check(a, m)
	}
	for _, a := range model {
		check(a, c)
	}
	return first.W, first.K, first.Sent >= 0
}

// around renders writer w's attempts k-1 to k+1 of a trace.
func around(tr []ingest.AttemptTrace, w, k int) string {
	var out []string
	for _, a := range tr {
		if a.W == w && a.K >= k-1 && a.K <= k+1 {
			out = append(out, fmt.Sprintf("#%d %v-%v ok=%v", a.K, a.Sent, a.End, a.OK))
		}
	}
	return fmt.Sprint(out)
}
