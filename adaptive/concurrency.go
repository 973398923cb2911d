package adaptive

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/seed93a044d1/retry"
)

// The constants of the Concurrency's limit control; the package doc says
// why each has its value.
const (
	defaultInitialLimit = 20
	defaultMinLimit     = 1
	defaultMaxLimit     = 1000

	// queueLow and queueHigh bound the attempts the limit lets wait in the
	// dependency's queue, as fractions of the attempts in flight (and at
	// least 1 and 2): below queueLow the limit may grow, above queueHigh it
	// is cut. Some queue is needed, or the client could not tell a limit
	// at the dependency's capacity from one below it; a tenth keeps the
	// extra latency within a tenth of the base.
	queueLow  = 0.05
	queueHigh = 0.10

	// growth is the first step the limit grows by in a round, as a
	// fraction of those in flight (and at least 1): half the band between
	// queueLow and queueHigh, so that one step never jumps over it. Each
	// round in a row that grows doubles the step, up to doubling the limit
	// (from the maxStreak-th such round on): a limit far below the
	// capacity is found in a few round trips, as by TCP's slow start,
	// while one near it, where rounds that grow alternate with rounds that
	// hold, moves by growth. A cut sets the streak back by maxStreak, so
	// that after one the limit grows by growth for maxStreak rounds before
	// the step doubles. Until its first cut, the limit starts with the
	// step at its largest and grows in every round that reached it and is
	// not cut: it knows nothing yet.
	growth    = (queueHigh - queueLow) / 2
	maxStreak = 6

	// noise is how many standard errors (of the round's mean latency and
	// of the base, from the spread of the latencies they were measured
	// from) a reading must pass to count: a queue to be cut for, a round's
	// mean below the base to measure the base again at once, a probe's
	// mean away from the base to replace it instead of being pooled with
	// it. A mean that is merely lucky moves nothing, or the base would
	// drift to the luckiest rounds and read a queue that is not there.
	noise = 3

	// throttleCut is the limit after a round with a throttling answer, as
	// a fraction of the limit: AIMD's decrease, at most once a round.
	throttleCut = 0.9

	// The base latency, the mean of attempts that do not wait, is first
	// the mean of the first rounds, at the initial limit, until they have
	// seen probeSamples attempts (or the initial limit, if fewer). It is
	// measured again at a pinned low limit (half the limit: if the limit
	// is at most twice the capacity, nothing waits) after probeFirst,
	// 2*probeFirst... rounds that learned something, then every
	// probeEvery, over a cohort of the pin's attempts (probeSamples, if
	// more); a probe within the noise of the base is pooled with it, the
	// attempts before weighing at most baseKeep.
	probeFirst   = 16
	probeEvery   = 256
	probeSamples = 16
	baseKeep     = 256

	// stall is how many times its size the attempts given a slot after a
	// cohort may end before the cohort ends without its last ones: far
	// more than a slow attempt's share, so that only a release never
	// called ends a cohort so.
	stall = 64
)

// Concurrency is a [retry.Concurrency] that needs no configured limit: it
// learns how many attempts may be in flight at once to a dependency from
// their latencies and from throttling answers, and bounds every attempt of
// every call that shares it to that many. It keeps as many in flight as
// fill the dependency with a short queue: when the mean latency of a round
// trip's attempts, against that of attempts that do not wait, shows more
// of them waiting at the dependency than a tenth of those in flight (and
// than the noise of the latencies), the limit is cut to what the
// dependency served plus a short queue; when it shows less than a
// twentieth and the limit was reached, the limit grows by 2.5% (at least
// one slot), a step that doubles with each round trip in a row that grows,
// up to doubling the limit. Until its first cut it grows so in every round
// trip that reached it, as TCP's slow start does. A throttling answer (see
// the package doc) cuts the limit to 0.9 of itself, once a round trip.
// Attempts the loop cut, whose error Is context.Canceled, teach it
// nothing. How the limit moves, and why this and not another algorithm, is
// in the package doc.
//
// Put one Concurrency in the [retry.Policy] of every call to one
// dependency:
//
//	slots := &adaptive.Concurrency{}
//	policy := retry.Policy{Concurrency: slots, Budget: retry.NewBudget(0.1, 1)}
//
// The zero value is ready to use: it starts at 20 slots and stays between
// 1 and 1000. Set InitialLimit, MinLimit and MaxLimit, if wanted, before
// the first Acquire and do not change them after. A Concurrency is safe for
// concurrent use by any number of goroutines, and must not be copied after
// first use. It reads no clock, except to bound a wait by the time given to
// Acquire: it learns from the durations the loop gives it, so a simulation
// in virtual time may drive it through TryAcquire.
//
// An attempt that finds every slot taken waits, in arrival order, until
// one is given back or the limit grows, its context ends, or it could no
// longer start in time (see [retry.Concurrency]). A slot freed goes to the
// longest waiter at once: a newcomer never takes it first.
type Concurrency struct {
	// InitialLimit is the limit before anything has been learned. 0 or
	// less means 20; it is held within MinLimit and MaxLimit.
	InitialLimit int

	// MinLimit is the fewest slots the limit is ever cut to, so that it
	// keeps learning. 0 or less means 1.
	MinLimit int

	// MaxLimit is the most slots the limit ever grows to. 0 or less means
	// 1000; below MinLimit it counts as MinLimit.
	MaxLimit int

	mu       sync.Mutex
	ready    bool
	limit    float64
	inFlight int
	waiters  []*waiter // in arrival order; a waiter given a slot is removed
	free     *slot     // slots given back, oldest first, to be given out again
	freeEnd  *slot
	taken    uint64 // slots given out, ever: each slot's number

	base     time.Duration // the mean latency of attempts that do not wait, 0 until measured
	baseErr  float64       // the square of the base's standard error, relative to it
	baseSums sums          // the attempts that measured the base
	based    bool          // whether the first rounds have measured it
	cut      bool          // whether the limit has been cut: until then it grows unless it would be
	round    round
	rounds   int // rounds since the last probe
	probes   int
	streak   int // rounds in a row that grew, capped at maxStreak
	probe    baseProbe
}

// slot is one slot given out. Its release is made once, when the slot is
// first needed, and given out again with the slot: a slot costs no
// allocation once as many have been made as are ever in flight at once.
type slot struct {
	c        *Concurrency
	n        uint64 // its number among the slots given out
	inFlight int    // slots taken when it was, itself included
	full     bool   // it took the last slot the limit allowed
	held     bool
	next     *slot
	release  func(time.Duration, error)
}

// waiter is one attempt waiting for a slot. ready is closed when it is
// given one, s.
type waiter struct {
	ready chan struct{}
	s     *slot
}

// cohort is the attempts a round or a probe learns from: the first size
// given a slot after it began (numbered from+1 to from+size), until every
// one has ended. Waiting for them all, not for the first size to end,
// keeps the slow ones: the first to end are the quickest, and their mean
// would read no queue where there is one. So that a release never called
// does not stall the learning for good, a cohort also ends once stall
// times size attempts given a slot after it have ended.
type cohort struct {
	from        uint64
	size        int
	ended, late int
}

// end is told that the attempt of the slot numbered n ended; it reports
// whether that attempt is one of the cohort's, and whether the cohort is
// over.
func (h *cohort) end(n uint64) (member, over bool) {
	switch {
	case n <= h.from:
		return false, false // taken before it began: old news
	case n > h.from+uint64(h.size):
		h.late++
	default:
		h.ended++
		member = true
	}
	return member, h.ended >= h.size || h.late >= stall*h.size
}

// round gathers what the attempts of one round trip told: a cohort of half
// the limit.
//
// The attempts that succeeded or timed out tell how many waited in the
// dependency's queue: with n in flight on average and a mean latency of d,
// the dependency answered n/d a second (Little's law), which kept n*base/d
// of them in service, base being the mean latency of an attempt that does
// not wait; the rest waited. This is Vegas's estimate, with means rather
// than the least latency, which in a closed loop picks the attempts that
// were luckiest in the queue and sees a third of it. The round sums its
// attempts, and those that took the last slot the limit allowed (full).
type round struct {
	cohort
	throttled bool
	all, full sums
}

// sums adds up attempts: how many, and the slots in flight and the
// latencies they saw, and the squares of the latencies.
type sums struct {
	k, n float64
	d    time.Duration
	dd   float64 // in seconds squared
}

// scale weighs the attempts by f.
func (q *sums) scale(f float64) {
	q.k *= f
	q.n *= f
	q.d = time.Duration(float64(q.d) * f)
	q.dd *= f
}

// merge adds the attempts of o.
func (q *sums) merge(o *sums) {
	q.k += o.k
	q.n += o.n
	q.d += o.d
	q.dd += o.dd
}

func (q *sums) add(n int, d time.Duration) {
	q.k++
	q.n += float64(n)
	q.d += d
	q.dd += d.Seconds() * d.Seconds()
}

// relErr returns the square of the standard error of the mean latency,
// relative to the mean: 1 (as unsure as can be) with fewer than 2 added.
func (q *sums) relErr() float64 {
	if q.k < 2 || q.d <= 0 {
		return 1
	}
	m := q.d.Seconds() / q.k
	v := max(0, q.dd/q.k-m*m) * q.k / (q.k - 1)
	return v / (q.k * m * m)
}

// mean returns the mean latency, 0 if nothing was added.
func (q *sums) mean() time.Duration {
	if q.k == 0 {
		return 0
	}
	return time.Duration(float64(q.d) / q.k)
}

// queue returns the mean number in flight, and how many of them the
// dependency served and how many waited, by the base latency base; ok is
// false if nothing was added.
func (q *sums) queue(base time.Duration) (n, served, queued float64, ok bool) {
	if q.k == 0 || base <= 0 {
		return 0, 0, 0, false
	}
	n = q.n / q.k
	served = n * min(float64(base)/float64(q.mean()), 1)
	return n, served, n - served, true
}

// baseProbe is a measurement of the base latency at a pinned limit: of a
// cohort of attempts that start with no more than pin in flight.
type baseProbe struct {
	cohort
	on  bool
	pin int
	ok  sums // its successes
}

// Acquire takes a slot, or waits for one; see [retry.Concurrency]. It
// returns a slot at once when one is free and no attempt waits; otherwise
// it waits in arrival order, and returns [retry.ErrNoSlot] when by (if not
// zero) passes first, or context.Cause(ctx) when ctx ends first. An attempt
// whose ctx has already ended, or whose by has already passed, does not
// wait.
//
// The release returned gives the slot back and tells the Concurrency how
// the attempt went: call it exactly once, with the attempt's duration and
// its error as the loop gives them: nil for a success, an error that Is
// context.Canceled for an attempt that says nothing of the dependency (it
// is not learned), the attempt's error otherwise. A second call of the same
// release is ignored as long as the slot has not been given out again (it
// is given out again only once every slot given back before it has been);
// after that it would give back the new holder's slot, which the new
// holder's own release then leaves alone: the count stays right, but one
// attempt more than the limit may be in flight until then.
func (c *Concurrency) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	c.mu.Lock()
	if s := c.tryTake(); s != nil {
		c.mu.Unlock()
		return s.release, nil
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return nil, context.Cause(ctx)
	}
	var stop <-chan time.Time
	if !by.IsZero() {
		d := time.Until(by)
		if d <= 0 {
			c.mu.Unlock()
			return nil, retry.ErrNoSlot
		}
		t := time.NewTimer(d)
		defer t.Stop()
		stop = t.C
	}
	w := &waiter{ready: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()

	var err error
	select {
	case <-w.ready:
		return w.s.release, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-stop:
		err = retry.ErrNoSlot
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.s != nil {
		// Given a slot as it gave up: pass it on, learning nothing.
		c.giveBack(w.s)
		c.learn(w.s, 0, context.Canceled)
		c.handOn()
		return nil, err
	}
	for i, o := range c.waiters {
		if o == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	return nil, err
}

// TryAcquire takes a slot if one is free and no attempt waits for one, and
// never waits: ok is false otherwise. It is for a simulation that drives
// the Concurrency on one goroutine in virtual time, and keeps its own queue
// of the attempts waiting; its release is Acquire's.
func (c *Concurrency) TryAcquire() (release func(time.Duration, error), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.tryTake(); s != nil {
		return s.release, true
	}
	return nil, false
}

// tryTake takes a slot if one is free and nobody waits. c.mu is held.
func (c *Concurrency) tryTake() *slot {
	c.setup()
	if len(c.waiters) > 0 || c.inFlight >= c.admit() {
		return nil
	}
	return c.take()
}

// setup gives the limit its initial value, once. c.mu is held.
func (c *Concurrency) setup() {
	if c.ready {
		return
	}
	c.ready = true
	c.limit = float64(c.initialLimit())
	c.streak = maxStreak
	c.newRound()
}

// take gives out a slot. c.mu is held, and a slot is free.
func (c *Concurrency) take() *slot {
	s := c.free
	if s != nil {
		c.free = s.next
		if c.free == nil {
			c.freeEnd = nil
		}
		s.next = nil
	} else {
		s = &slot{c: c}
		s.release = s.giveBack
	}
	c.taken++
	c.inFlight++
	s.n, s.inFlight, s.held = c.taken, c.inFlight, true
	s.full = !c.probe.on && c.inFlight >= c.admit()
	return s
}

// giveBack is the release of slot s.
func (s *slot) giveBack(d time.Duration, err error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.held {
		return // released already
	}
	c.giveBack(s)
	c.learn(s, d, err)
	c.handOn()
}

// giveBack frees s for the next taker: the one given back longest ago is
// given out first. c.mu is held.
func (c *Concurrency) giveBack(s *slot) {
	s.held = false
	c.inFlight--
	if c.freeEnd == nil {
		c.free = s
	} else {
		c.freeEnd.next = s
	}
	c.freeEnd = s
}

// handOn gives free slots to the longest waiters. c.mu is held.
func (c *Concurrency) handOn() {
	for len(c.waiters) > 0 && c.inFlight < c.admit() {
		w := c.waiters[0]
		c.waiters[0] = nil
		c.waiters = c.waiters[1:]
		w.s = c.take()
		close(w.ready)
	}
}

// admit returns the most slots that may be taken now: the limit, or the
// pin while the base latency is measured again. c.mu is held.
func (c *Concurrency) admit() int {
	if c.probe.on {
		return c.probe.pin
	}
	return int(c.limit)
}

// learn is told how the attempt of slot s ended: every slot given back,
// the attempts the loop cut included, which count as ended but teach
// nothing. c.mu is held.
func (c *Concurrency) learn(s *slot, d time.Duration, err error) {
	d = max(d, time.Nanosecond)
	cut := err != nil && errors.Is(err, context.Canceled)
	throttle := err != nil && !cut && throttled(err)
	// A failure that is neither a throttle nor a timeout may have come at
	// once, and tells nothing of the load; it only ends its attempt.
	latency := err == nil || !cut && !throttle && timedOut(err)
	if p := &c.probe; p.on {
		member, over := p.end(s.n)
		if member && err == nil {
			p.ok.add(s.inFlight, d)
		}
		if over {
			c.probed()
		}
		return
	}
	r := &c.round
	member, over := r.end(s.n)
	if member && throttle {
		r.throttled = true
	} else if member && latency {
		r.all.add(s.inFlight, d)
		if s.full {
			r.full.add(s.inFlight, d)
		}
	}
	if over {
		c.endRound()
	}
}

// probed ends the probe: its successes measure the base, if there are
// enough of them (half its cohort, or probeSamples); a probe of failures
// keeps the base there was, and is made again after as many rounds as
// any. c.mu is held.
func (c *Concurrency) probed() {
	p := &c.probe
	p.on = false
	if p.ok.k >= float64(min(probeSamples, p.size))/2 {
		c.measured(&p.ok)
		c.probes++
	}
	c.rounds = 0
	c.newRound()
}

// endRound moves the limit by what the round told, and begins the next
// one, or a probe. c.mu is held.
func (c *Concurrency) endRound() {
	r := &c.round
	if !c.based {
		// The first rounds measure the base at the initial limit, until
		// the first probe: the limit does not move until they have seen
		// probeSamples attempts (fewer if the limit is lower), or a
		// throttle.
		c.baseSums.merge(&r.all)
		c.base, c.baseErr = c.baseSums.mean(), c.baseSums.relErr()
		c.based = c.baseSums.k >= float64(min(probeSamples, c.initialLimit()))
		if !c.based && !r.throttled {
			c.newRound()
			return
		}
	}
	// The noise of the queue read, as a fraction of those in flight: of
	// the round's mean, from the spread of its latencies or, if more, of
	// the base's (a few latencies can be close by chance), and of the
	// base.
	sigma := math.Sqrt(max(r.all.relErr(), c.baseErr*c.baseSums.k/max(r.all.k, 1)) + c.baseErr)
	if m := r.all.mean(); m > 0 && 1-float64(m)/float64(c.base) > noise*sigma {
		// Faster than the base, by more than the noise: the base was
		// measured when the dependency was slower. Measure it again now,
		// before anything is read against it.
		c.startProbe()
		return
	}
	if r.throttled {
		c.limit *= throttleCut
		c.streak = -maxStreak
		c.cut = true
	} else if n, served, queued, ok := r.all.queue(c.base); ok && queued > max(2, queueHigh*n, noise*sigma*n) {
		// Too long a queue, and more than noise: down to what the
		// dependency served and a short queue, but by half at most.
		target := served + max(1.5, (queueLow+queueHigh)/2*served)
		c.limit = max(min(c.limit, target), c.limit/2)
		c.streak = -maxStreak
		c.cut = true
	} else if n, _, queued, ok := r.full.queue(c.base); ok && (queued < max(1, queueLow*n) || !c.cut && queued <= max(2, queueHigh*n)) {
		// The limit held attempts back and the dependency had room: grow,
		// only then, and by a step that doubles with each round in a row
		// that grew, up to doubling the limit.
		n = min(c.limit, n)
		step := n * min(1, growth*float64(int(1)<<max(0, c.streak)))
		c.limit = max(c.limit, n+max(1, step))
		c.streak = min(c.streak+1, maxStreak)
	} else if ok {
		// A queue within the band: hold, and grow from the first step
		// next time. A round in which the limit was not reached says
		// nothing of the room above it, and keeps the streak.
		c.streak = min(c.streak, 0)
	}
	c.limit = math.Min(math.Max(c.limit, float64(c.minLimit())), float64(c.maxLimit()))
	if r.all.k > 0 || r.throttled {
		c.rounds++ // a round that learned nothing does not bring the next probe nearer
	}
	every := probeEvery
	if c.probes < 4 {
		every = probeFirst << c.probes
	}
	if c.rounds >= every {
		c.startProbe()
		return
	}
	c.newRound()
}

// measured is told of a probe's successes p: the base is their mean, or if
// that is within the noise of the base, the base pooled with them (its own
// attempts weighing no more than baseKeep), so that it grows surer with
// each probe while the dependency stays the same. c.mu is held.
func (c *Concurrency) measured(p *sums) {
	b := c.baseSums
	if m := p.mean(); b.k > 0 && math.Abs(1-float64(m)/float64(c.base)) <= noise*math.Sqrt(p.relErr()+c.baseErr) {
		if b.k > baseKeep {
			b.scale(baseKeep / b.k)
		}
		b.merge(p)
	} else {
		b = *p
	}
	c.baseSums = b
	c.base, c.baseErr = b.mean(), b.relErr()
}

// startProbe pins the limit to half of itself, to measure the base
// latency. c.mu is held.
func (c *Concurrency) startProbe() {
	pin := max(c.minLimit(), int(c.limit)/2)
	c.probe = baseProbe{cohort: cohort{from: c.taken, size: max(probeSamples, pin)}, on: true, pin: pin}
}

// newRound begins a round with the slots taken from now on. c.mu is held.
func (c *Concurrency) newRound() {
	c.round = round{cohort: cohort{from: c.taken, size: max(1, (int(c.limit)+1)/2)}}
}

// timedOut reports whether err, anywhere in its tree, is a timeout: its
// attempt ran at least its duration, which is then a bound on the latency.
func timedOut(err error) bool {
	return find(err, isTimeout, 0) != nil
}

func isTimeout(err error) bool {
	if err == context.DeadlineExceeded {
		return true
	}
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// Limit returns the current limit: the most attempts it lets be in flight
// at once, between MinLimit and MaxLimit. While it measures the base
// latency again, for a round trip or two, it admits only half as many.
func (c *Concurrency) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setup()
	return int(c.limit)
}

// InFlight returns the number of slots taken now.
func (c *Concurrency) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Waiting returns the number of attempts waiting for a slot now.
func (c *Concurrency) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *Concurrency) minLimit() int {
	if c.MinLimit <= 0 {
		return defaultMinLimit
	}
	return c.MinLimit
}

func (c *Concurrency) maxLimit() int {
	m := c.MaxLimit
	if m <= 0 {
		m = defaultMaxLimit
	}
	return max(m, c.minLimit())
}

func (c *Concurrency) initialLimit() int {
	l := c.InitialLimit
	if l <= 0 {
		l = defaultInitialLimit
	}
	return min(max(l, c.minLimit()), c.maxLimit())
}

var _ retry.Concurrency = (*Concurrency)(nil)
