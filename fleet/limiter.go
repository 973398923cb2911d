package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// Options tune a [Limiter] or a [Concurrency]. The zero value (or a nil
// *Options) is the default: a round trip to the store may take 100ms,
// batches cover at most 50ms of the rate, and a store that is slow or down
// fails closed. For a Concurrency, Fallback is a share of its limit (see
// [Concurrency]) and Horizon does not apply.
type Options struct {
	// Timeout bounds each round trip to the store; a booking never waits
	// longer than that, nor past its caller's deadline. A store that has not
	// answered by then counts as unavailable. The call to the store goes on
	// in the background up to 4 times Timeout before its context ends: an
	// answer that comes meanwhile adds its slots for later bookings, and a
	// client does not lose its connection to a round trip only a little
	// slower than Timeout. 0 means 100ms; [New] refuses a negative value.
	Timeout time.Duration

	// Fallback is the share of the rate that each process may use on its
	// own, through a local limiter, while the store is unavailable: with N
	// processes, 1/N keeps the fleet at the rate, a little more lets it ride
	// out an outage at some risk to the provider. The local limiter has that
	// share of the rate and of the burst (at least 1). 0 means fail closed:
	// while the store is unavailable, every booking that the process's own
	// slots cannot serve fails with an error that [errors.Is] ErrUnavailable
	// (see [Limiter]). [New] refuses a value outside [0, 1] (NaN included).
	Fallback float64

	// Horizon is the most a process books for itself in one round trip,
	// as a span of the schedule: at most Horizon*rate slots (and at most
	// 1024). The batch's size follows the process's demand (see [Limiter]);
	// the horizon caps what a process that stops needing slots can leave
	// unused. 0 means 50ms; a negative value books one slot per round trip.
	Horizon time.Duration

	// OnStoreError, when set, is called with the cause of each failed round
	// trip (a booking; refunds are not reported), on a goroutine of the
	// Limiter's: for a log line or a metric. It must not block.
	OnStoreError func(error)
}

// ErrUnavailable is the reason a [Limiter] that fails closed gives when its
// store does not answer in time or answers with an error; the error it
// returns wraps this and the store's own error.
var ErrUnavailable = errors.New("fleet: limiter store unavailable")

// errNoAnswer is the cause when the store does not answer within Timeout. It
// is not context.DeadlineExceeded on purpose: the loop would take that for
// the caller's own deadline.
type errNoAnswer time.Duration

func (e errNoAnswer) Error() string {
	return "no answer within " + time.Duration(e).String()
}

const (
	defaultTimeout = 100 * time.Millisecond
	defaultHorizon = 50 * time.Millisecond
	maxBatch       = 1024

	// demandWindow is the window over which a Limiter counts its process's
	// bookings to size its batches: long enough to see a few bookings of a
	// process that takes its share of a rate of 100/s, short enough to
	// follow a change in demand within a second.
	demandWindow = 250 * time.Millisecond

	// minPause and maxPause bound how long the Limiter leaves a store
	// alone after a failed booking: bookings meanwhile fall back (or fail)
	// at once instead of each waiting Timeout for a store that is down, and
	// the first booking after the pause asks the store again. The pause
	// starts short, so that a store back at once (a restart, a connection
	// that dropped) costs little more than its own absence, and grows by
	// pauseGrowth with each failure in a row while the store stays away, up
	// to maxPause: short enough that a store back after a long outage costs
	// at most that much more of the fleet's rate, long enough that a
	// process asks a store that is down at most 20 times a second. Only
	// one booking of a process waits for such a probe; the others fail (or
	// fall back) at once meanwhile, so a store that hangs costs one
	// booking a Timeout per probe. See pauseAfter.
	// lateAnswer is how many times Options.Timeout a round trip may take
	// before its call to the store is cut (see book).
	lateAnswer = 4

	// padGrowth is how many pads a full batch spans at least (see
	// padFor), up to maxGrowth of the schedule: a pad is schedule no one
	// uses, so a batch that takes the whole rate wastes at most
	// 1/(padGrowth+1) of it, 2%, while this process knows the store's clock
	// only roughly; but a batch longer than a second would hold up the
	// fleet's other processes, and be lost if this one stopped.
	padGrowth = 49
	maxGrowth = time.Second

	// A first contact reads the store's clock firstReads times at once,
	// twice over, before it books (see warmUp). Clock probes (see probe):
	// at most maxProbes under way, spaced by a gap that
	// starts at minProbeGap and doubles, up to maxProbeGap, after each
	// probeMisses probes in a row that did not narrow the bounds on the
	// store's clock; one that does brings it back to minProbeGap. A link
	// whose delays vary is probed often, since now and then a probe is
	// faster than any before it one way; one that is slow but steady,
	// whose bounds no probe narrows, about once a second.
	maxProbes   = 3
	firstReads  = 4
	warmRounds  = 2
	probeMisses = 16
	minProbeGap = 5 * time.Millisecond
	maxProbeGap = time.Second

	minPause    = 10 * time.Millisecond
	maxPause    = 100 * time.Millisecond
	pauseGrowth = 1.5

	// maxInterval is the longest emission interval, about 36 years: a
	// lower rate counts as one slot per maxInterval. It keeps every sum of
	// the schedule (the store's now, plus a wait, the tolerance and a
	// batch's span) inside an int64 of nanoseconds, where a rate such as
	// rate.Every(math.MaxInt64) would make the interval wrap to a negative
	// duration and admit everything.
	maxInterval = time.Duration(1) << 60

	// maxAhead is the furthest ahead of now a booking is placed (after),
	// the tolerance included: a quarter of the int64 range, about 73 years.
	maxAhead = time.Duration(math.MaxInt64 / 4)
)

// Limiter is a [retry.Limiter] whose rate is shared by every process that
// books on the same [Store]: each attempt takes a slot of the store's
// schedule, so the whole fleet starts at most rate attempts per second, plus
// the burst, over any window (see the package doc for the proof and for what
// a late attempt changes). Make one with [New]; the modules retrypg and
// retryredis make one on their stores. The zero Limiter is not usable: its
// Reserve fails with an error that says so.
//
// A process books slots for itself in batches, one round trip each, and
// hands them out to its calls: a booking takes the first unused slot of the
// process at or after the time it asks for, or waits for the next round trip,
// which it shares with the bookings that arrive meanwhile. The slots of a
// batch keep their places on the store's schedule, so handing them out
// locally never lets the fleet exceed the limit; a slot that passes unused is
// lost, never carried. A batch holds as many slots as the process is
// expected to ask for before they pass, from its recent demand and from how
// far ahead the schedule is booked: one when the fleet is below its limit
// (no slot wasted, one round trip per attempt), up to Options.Horizon of the
// rate when the schedule is booked ahead (few round trips, none wasted).
//
// A booking's Start is its slot's time on this process's clock: the store's
// now plus the wait it gave, with the store's now placed as late as it can
// have been, so that no slot starts before its place on the store's
// schedule: when the answer arrived (from a plain [Store]), or mapped from
// the store's own clock (from a [ClockedStore]), whose offset from the
// process's each round trip bounds (the store read its clock after the
// request left and before the answer came). A slot then starts late by at
// most the round trip, or the bounds' width, and two processes' slots by
// different amounts, so each booking leaves the schedule free after its
// batch for that width less an interval (the pad): the next booking's
// slots, by any process, keep the schedule's pace from this batch's latest
// start. A batch whose answer came slower than its pad allows for gives up
// the slots that could start too late: a slot whose place passed while the
// answer was on its way starts at once if it passed by at most an interval
// and the pad covers it, and the last slots of a batch go unused if the
// round trip or the bounds outgrew the pad. So the fleet keeps the limit
// whatever the round trips take, on the way out and back.
//
// The pads are schedule no one uses, so a process keeps them small: a batch
// that takes the whole rate spans at least 49 pads (up to a second of it).
// From a plain Store the pads cover the slowest round trip lately. From a
// ClockedStore a process narrows the bounds: New reads the store's clock
// four times at once, twice over, in the background (the first reads open
// the client's connections, whose dials would make the bounds wide), and a
// first booking that comes before those reads are back waits for them; a
// process that knows the store's clock only roughly (a link whose delays
// vary) asks the store its time now and then (ClockedStore.Now); and a
// booking asks for slots at least as far ahead as its answers lately took
// to come back, so that they do not pass on the way. On a link whose round
// trips are steady and shorter than an interval, none of this costs
// anything but the first reads. A booking's Slack is the time the rate
// takes to refill the burst (at least 1ms), as for [retry.RateLimiter].
//
// A booking is never earlier than the time asked for, when that is within
// the burst's tolerance (or one interval) from now; a retry planned later
// than that is booked that far ahead, because the store keeps one time (its
// schedule's end) and a booking far ahead would hold up the whole fleet
// until then. The loop gives such a booking back and books again when the
// retry's wait is over (see [retry.Reservation].Slack), so retries whose
// waits end together do not start together above the limit.
//
// Cancel gives a slot back to the process, which hands it out again if it
// has not passed; when the process's latest batch is that one slot (at low
// rates, or below the limit), it goes back to the store too, which takes it
// back only if no booking came after (see [Store].Refund). A slot of a
// larger batch stays with the process: a refund the store refused would
// lose the batch's whole unused tail. Refunds are sent in the background, and the
// process's next round trip waits for them: were it to reach the store
// first, the store would refuse the refund and the slot would be lost. A
// slot given back while a round trip is under way stays with the process
// instead, for the same reason; that round trip's waiters take it, and the
// slot it booked, if it booked one and they no longer need it, goes back to
// the store.
//
// When the store does not answer within Options.Timeout, or fails, the
// Limiter fails closed (Reserve returns an error that [errors.Is]
// ErrUnavailable and wraps the cause), or, with Options.Fallback, books on a
// local limiter at that share of the rate; slots already booked are still
// handed out. It asks the store again after a pause that starts at 10ms and
// grows 1.5 times with each failure in a row, up to 100ms, less a random
// part of up to half (so that processes that saw the store fail together do
// not ask it together): a store back after an outage costs about the
// outage and at most 100ms more. One booking asks (a probe) and waits for
// the answer; the others meanwhile are served as while the store is left
// alone. Nothing makes it unlimited
// but a rate of rate.Inf.
//
// A Limiter is safe for concurrent use by any number of goroutines. Every
// process must use the same rate and burst for a store: the store keeps
// only the schedule's end.
type Limiter struct {
	store     Store
	clocked   ClockedStore // store, when it tells its clock
	sched     Schedule
	rate      float64 // per second
	slack     time.Duration
	maxAfter  time.Duration // the most a booking is placed ahead of now
	batchCap  int
	horizon   time.Duration
	timeout   time.Duration
	fallback  *rate.Limiter // nil: fail closed
	fbSlack   time.Duration
	onErr     func(error)
	unlimited bool

	mu          sync.Mutex
	batches     []*batch  // those with unused slots not yet passed, oldest first
	latest      *batch    // the last one booked
	frontier    time.Time // where, on the local clock, the store's next free slot was at the last booking
	flight      *flight   // the round trip under way, if any
	backlog     int       // bookings the last round trip could not serve
	downUntil   time.Time // while the store is left alone
	downErr     error
	fails       int // failed round trips in a row
	clock       storeClock
	warming     chan struct{} // closed when New's first contact is over
	warmErr     error         // why it failed, if it did
	rtt         time.Duration // the slowest round trip lately, forgotten by an eighth a round trip
	lead        time.Duration // how long answers take to come back, lately: see ahead
	probes      int           // clock probes under way
	probeGap    time.Duration // between probes, while they help
	probeMisses int           // probes in a row that did not narrow the bounds
	nextProbe   time.Time     // no probe before
	refunding   int           // refunds under way
	refunded    chan struct{} // closed when they are done; nil when none is under way
	fbFrom      time.Time     // the fallback books no earlier: the frontier when the store failed
	fbLast      time.Time     // the latest time given to the fallback, which must not go back
	resume      time.Time     // the latest start the fallback booked: the store's next booking is not earlier
	winStart    time.Time     // demand: bookings counted since winStart
	winCount    int
	demand      float64 // bookings per second in the last window
}

// New returns a Limiter of r attempts per second with bursts of burst,
// shared through store by every process that uses it; opts may be nil.
//
// It fails, with an error that names the field, for a nil store, a rate
// that admits nothing (0 or less, or NaN), a burst below 1 (except with
// rate.Inf), a negative Options.Timeout, or an Options.Fallback outside
// [0, 1]: input that would otherwise show only as every call failing; and
// for a store with a BookClocked method but no Now, which would otherwise
// be taken for a plain [Store] (see [ClockedStore]). With a ClockedStore it
// starts reading the store's clock at once, in the background (see
// [Limiter]); a failure there is reported by the first booking.
//
// A rate of rate.Inf makes every booking start at once, without a round
// trip, whatever the burst. A rate above 1e9 counts as 1e9 (a slot every
// nanosecond), and one below a slot every 2^60ns (about 36 years, such as
// rate.Every(math.MaxInt64)) as a slot every 2^60ns: its burst, then nothing
// for decades.
func New(store Store, r rate.Limit, burst int, opts *Options) (*Limiter, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	_, booksClocked := store.(interface {
		BookClocked(context.Context, Schedule, int, time.Duration) (time.Duration, int64, int64, error)
	})
	_, clocked := store.(ClockedStore)
	switch {
	case store == nil:
		return nil, errors.New("fleet: store is nil")
	case booksClocked && !clocked:
		// A ClockedStore written before it had Now would otherwise be
		// taken, silently, for a plain Store.
		return nil, fmt.Errorf("fleet: store %T has BookClocked but no Now: a ClockedStore needs both", store)
	case r == rate.Inf:
	case !(r > 0):
		return nil, fmt.Errorf("fleet: rate %v admits no attempt: it must be above 0 (rate.Inf for no limit)", float64(r))
	case burst < 1:
		return nil, fmt.Errorf("fleet: burst %d admits no attempt: it must be at least 1", burst)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("fleet: Options.Timeout %v is negative (0 means the default, 100ms)", o.Timeout)
	}
	if !(o.Fallback >= 0 && o.Fallback <= 1) {
		return nil, fmt.Errorf("fleet: Options.Fallback %v is not a share of the rate between 0 and 1", o.Fallback)
	}
	l := &Limiter{store: store, onErr: o.OnStoreError}
	l.clocked, _ = store.(ClockedStore)
	l.clock.epoch = time.Now()
	if r == rate.Inf {
		l.unlimited = true
		return l, nil
	}
	l.rate = min(float64(r), 1e9)
	// Clamp in float64 before converting: a float64 above the int64 range
	// converts to a negative Duration.
	interval := time.Duration(math.Min(math.Max(1, math.Round(float64(time.Second)/l.rate)), float64(maxInterval)))
	l.rate = max(l.rate, float64(time.Second)/float64(maxInterval))
	tolerance := time.Duration(math.Min(float64(burst-1)*float64(interval), float64(maxAhead)))
	l.sched = Schedule{Interval: interval, Tolerance: tolerance}
	l.maxAfter = max(tolerance, interval)
	l.slack = max(tolerance+interval, time.Millisecond)

	l.timeout = o.Timeout
	if l.timeout <= 0 {
		l.timeout = defaultTimeout
	}
	l.horizon = min(o.Horizon, maxInterval)
	if l.horizon == 0 {
		l.horizon = defaultHorizon
	}
	l.batchCap = 1
	if l.horizon > 0 {
		l.batchCap = int(min(maxBatch, max(1, l.rate*l.horizon.Seconds())))
	} else {
		l.horizon = 0
	}
	if share := o.Fallback; share > 0 {
		fb := l.rate * share
		fbBurst := max(1, math.Ceil(float64(burst)*share))
		l.fallback = rate.NewLimiter(rate.Limit(fb), int(fbBurst))
		l.fbSlack = max(time.Duration(fbBurst/fb*float64(time.Second)), time.Millisecond)
	}
	if l.clocked != nil {
		// The first contact, in the background: a process makes its
		// limiters before its first calls, which then need not wait for
		// the clock. A failure here is the first booking's to find.
		l.warming = make(chan struct{})
		go func() {
			err := l.warmUp(context.Background())
			l.mu.Lock()
			l.warmErr = err
			l.mu.Unlock()
			close(l.warming)
		}()
	}
	return l, nil
}

// batch is the slots of one booking that this process holds.
type batch struct {
	first time.Time // slot 0's place on the schedule, less the tolerance, on the local clock
	floor time.Time // no slot is earlier: the time the booking asked for
	every time.Duration
	n     int // slots held: a refund trims the tail
	free  int // of them, unused
	mark  int64
	kept  bool // in Limiter.batches
	taken []bool
	refs  []slotRef // the Handle of each slot, made with the batch
	next  int       // no free slot below this index
}

// at returns the time slot i may start.
func (b *batch) at(i int) time.Time {
	t := b.first.Add(time.Duration(i) * b.every)
	if t.Before(b.floor) {
		return b.floor
	}
	return t
}

// firstFree returns the first unused slot at or after x, or -1.
func (b *batch) firstFree(x time.Time) int {
	i := 0
	if x.After(b.floor) {
		if d := x.Sub(b.first); d > 0 {
			i = int(min((d+b.every-1)/b.every, math.MaxInt32))
		}
	}
	for i = max(i, b.next); i < b.n; i++ {
		if !b.taken[i] {
			return i
		}
	}
	return -1
}

// slotRef is a booking's Handle: the slot i of b.
type slotRef struct {
	b *batch
	i int
}

// flight is one round trip to the store, shared by the bookings that wait
// for it.
type flight struct {
	done    chan struct{}
	n       int
	after   time.Duration
	pad     time.Duration // left free after the batch on the store's schedule
	warm    bool          // the first contact: read the store's clock first
	joined  bool          // New's first contact was under way when f was launched
	waiters []*waiter
	settled bool
	err     error
	timer   *time.Timer
}

// waiter is a booking waiting for a flight.
type waiter struct {
	want time.Time
	got  *slotRef
	gone bool
}

// Reserve books one attempt to start at t or later (see [Limiter] for how
// far ahead it books). It needs no round trip when the process holds an
// unused slot; otherwise it waits for one, at most Options.Timeout, and
// returns when ctx ends, with context.Cause(ctx). It fails with an error
// that [errors.Is] ErrUnavailable when the store is unavailable and the
// Limiter fails closed.
func (l *Limiter) Reserve(ctx context.Context, t time.Time) (retry.Reservation, error) {
	if l.unlimited {
		return retry.Reservation{Start: t}, nil
	}
	if l.store == nil {
		return retry.Reservation{}, errors.New("fleet: a Limiter must be made by New")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	l.mu.Lock()
	now := time.Now()
	l.count(now)
	l.probe(now)
	var w *waiter
	for {
		want := l.target(t, now)
		if ref := l.take(want, now); ref != nil {
			l.mu.Unlock()
			return l.reservation(ref), nil
		}
		if now.Before(l.downUntil) || l.fails > 0 && l.flight != nil {
			// Left alone, or being probed by another booking, which alone
			// waits for the answer.
			r, err := l.unavailable(now, l.downErr)
			l.mu.Unlock()
			return r, err
		}
		f := l.flight
		if f == nil {
			f = l.launch(ctx, want, now)
		}
		w = &waiter{want: want}
		f.waiters = append(f.waiters, w)
		l.mu.Unlock()

		select {
		case <-f.done:
		case <-ctx.Done():
			l.mu.Lock()
			if w.got != nil {
				l.release(w.got, time.Now())
			}
			w.gone = true
			l.mu.Unlock()
			return retry.Reservation{}, context.Cause(ctx)
		}
		l.mu.Lock()
		if w.got != nil {
			r := l.reservation(w.got)
			if now := time.Now(); r.Start.Before(now) {
				// A slot whose place passed while the answer was on its
				// way starts now (see settle); its Start says so, so that
				// the loop does not take it for a stalled wake-up.
				r.Start = now
			}
			l.mu.Unlock()
			return r, nil
		}
		if f.err != nil {
			r, err := l.unavailable(time.Now(), f.err)
			l.mu.Unlock()
			return r, err
		}
		now = time.Now() // the batch was too small for every waiter: book again
	}
}

// probe asks a ClockedStore its time, in the background, while this
// process knows the store's clock too roughly: its bookings then leave pads
// of the schedule unused (see padFor) as wide as the bounds on the clock
// are, less an interval, and each round trip can narrow the bounds. It
// starts probes only while a pad would be more than 1/64 of the horizon,
// and not while the store is failing.
func (l *Limiter) probe(now time.Time) {
	if l.clocked == nil || l.probes >= maxProbes || now.Before(l.nextProbe) || l.fails > 0 {
		return
	}
	if w, ok := l.clock.width(now); !ok || (w-l.sched.Interval)*64 <= l.horizon {
		return // before the first contact (see warmUp), or narrow enough
	}
	if l.probeGap == 0 {
		l.probeGap = minProbeGap
	}
	l.nextProbe = now.Add(l.probeGap)
	l.probes++
	go l.probeOnce()
}

// probeOnce makes one clock probe and spaces the next by whether it
// narrowed the bounds.
func (l *Limiter) probeOnce() {
	// As long as a booking's call may take (see book): a client may close
	// a connection whose call its context cut.
	ctx, cancel := context.WithTimeout(context.Background(), lateAnswer*l.timeout)
	sent := time.Now()
	storeNow, err := l.clocked.Now(ctx)
	recv := time.Now()
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.probes--
	if err != nil {
		return // a booking will tell, and pause
	}
	before := l.clock.hi - l.clock.lo
	at, after := l.clock.local(sent, recv, storeNow)
	l.noteLead(recv.Sub(at))
	if int64(after) < before {
		l.probeGap, l.probeMisses = minProbeGap, 0
	} else if l.probeMisses++; l.probeMisses >= probeMisses {
		l.probeGap, l.probeMisses = min(2*l.probeGap, maxProbeGap), 0
	}
	l.nextProbe = recv.Add(l.probeGap)
}

// target is the earliest slot time a booking for t may take: t, but no
// earlier than now and no later than maxAfter from now.
func (l *Limiter) target(t, now time.Time) time.Time {
	if !t.After(now) {
		return now
	}
	if t.Sub(now) > l.maxAfter {
		return now.Add(l.maxAfter)
	}
	return t
}

// count adds one booking to the demand estimate: the bookings of the last
// full window of demandWindow, per second.
func (l *Limiter) count(now time.Time) {
	const window = demandWindow
	if elapsed := now.Sub(l.winStart); elapsed >= window {
		l.demand = 0
		if elapsed < 2*window {
			l.demand = float64(l.winCount) / elapsed.Seconds()
		}
		l.winStart, l.winCount = now, 0
	}
	l.winCount++
}

// size returns how many slots the next round trip books: as many as the
// process is expected to ask for before the last of them passes, at demand
// d per second with the schedule booked q ahead, k <= 1 + d*(q + k/rate),
// that is k = (1 + d*q) / (1 - d/rate); all it may (batchCap) once the
// demand reaches the rate.
func (l *Limiter) size(now time.Time, waiting int) int {
	if l.batchCap == 1 {
		return 1
	}
	k := float64(l.batchCap)
	d := l.demand
	if open := now.Sub(l.winStart); open >= 10*time.Millisecond {
		d = max(d, float64(l.winCount)/open.Seconds()) // a rise shows at once
	}
	if d < l.rate {
		q := max(l.frontier.Sub(now), 0).Seconds()
		k = (1 + d*q) / (1 - d/l.rate)
	}
	return max(1, min(l.batchCap, max(waiting, int(min(k, maxBatch)))))
}

// take hands out the first unused slot at or after want, dropping the
// batches that have passed by now, or returns nil. It does not take a slot so far
// ahead (past the horizon from the later of want and the store's next free
// slot, as last seen) that a round trip would likely find an earlier one.
func (l *Limiter) take(want, now time.Time) *slotRef {
	var best *batch
	var bi int
	var bt time.Time
	keep := l.batches[:0]
	for _, b := range l.batches {
		if b.free == 0 || b.at(b.n-1).Before(now) {
			b.kept = false // a slot given back brings it back, if it has not passed
			continue
		}
		keep = append(keep, b)
		if i := b.firstFree(want); i >= 0 {
			if at := b.at(i); best == nil || at.Before(bt) {
				best, bi, bt = b, i, at
			}
		}
	}
	clear(l.batches[len(keep):])
	l.batches = keep
	if best == nil {
		return nil
	}
	limit := want
	if l.frontier.After(limit) {
		limit = l.frontier
	}
	if bt.After(limit.Add(l.horizon)) {
		return nil
	}
	best.taken[bi] = true
	best.free--
	for best.next < best.n && best.taken[best.next] {
		best.next++
	}
	return &best.refs[bi]
}

// reservation is the booking of slot ref.
func (l *Limiter) reservation(ref *slotRef) retry.Reservation {
	return retry.Reservation{Start: ref.b.at(ref.i), Slack: l.slack, Handle: ref}
}

// launch starts a round trip for a booking that wants a slot at or after
// want, and returns it. Its context keeps ctx's values but not its end: the
// round trip serves every booking that waits for it, so one caller leaving
// must not cut it; each waiter leaves when its own ctx ends.
func (l *Limiter) launch(ctx context.Context, want, now time.Time) *flight {
	f := &flight{done: make(chan struct{}), n: l.size(now, l.backlog+1), after: want.Sub(now)}
	if l.clocked != nil {
		f.after = max(f.after, l.ahead(now))
	}
	if d := l.resume.Sub(now); d > f.after {
		f.after = min(d, maxAhead) // after an outage, not over the fallback's bookings
	}
	l.flight, l.backlog = f, 0
	if l.clocked != nil && !l.clock.ok {
		f.warm = true // the first contact: the clock first (see book)
		select {
		case <-l.warming:
		default:
			f.joined = true // New's first contact is under way
		}
	}
	f.timer = time.AfterFunc(l.timeout, func() {
		l.mu.Lock()
		l.settle(f, errNoAnswer(l.timeout), time.Now())
		l.mu.Unlock()
	})
	go l.book(context.WithoutCancel(ctx), f, l.refunded)
	return f
}

// book makes f's round trip, once the refunds under way when it was
// launched are done (refunded closed; nil for none): a booking that reached
// the store first would make the store refuse them, and the slots given
// back would be lost. The wait counts against the round trip's Timeout. An
// answer that comes after f has timed out still adds its slots, which are
// on the store's schedule either way.
func (l *Limiter) book(ctx context.Context, f *flight, refunded <-chan struct{}) {
	// The store's call itself may take lateAnswer times the Timeout, though
	// f's waiters stop waiting at the Timeout: an answer that comes a little
	// late still adds its slots, and a client that ends a call its context
	// cut may also close the connection it was on (pgx does), so that a
	// store slower than the Timeout now and then would cost a new
	// connection, several round trips, each time.
	var err error
	if f.warm {
		// The first contact's clock reads, unless New's come back with
		// the clock: f reads it itself unless New's were under way when f
		// was launched, whose failure is then f's. f's waiters stop
		// waiting at its Timeout all the same (see launch); the booking
		// goes on, and adds its slots for the next.
		<-l.warming
		l.mu.Lock()
		known, failed := l.clock.ok, l.warmErr
		l.mu.Unlock()
		switch {
		case known:
		case f.joined:
			err = failed
		default:
			err = l.warmUp(ctx)
		}
	}
	call, cancelCall := context.WithTimeout(ctx, lateAnswer*l.timeout)
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	if refunded != nil {
		select {
		case <-refunded:
		case <-ctx.Done():
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // the refunds took the whole Timeout
	}
	if err == nil {
		l.mu.Lock()
		// Enough slots for the bookings that came to wait for f since it
		// was launched (not for the demand their wait makes seem), up to a
		// batch: at a fleet's start, every goroutine's first booking waits
		// for the first round trip.
		waiting := 0
		for _, w := range f.waiters {
			if !w.gone {
				waiting++
			}
		}
		f.n = max(f.n, min(l.batchCap, waiting))
		if f.warm {
			f.after = max(f.after, l.ahead(time.Now())) // as launch would have, had it known the clock
		}
		l.padFor(f, time.Now())
		l.mu.Unlock()
	}
	sent := time.Now()
	var wait time.Duration
	var mark, storeNow int64
	if err != nil {
		// Not sent.
	} else {
		// The pad rides on the interval: the store moves the schedule's
		// end n intervals on, and this process spaces the slots itself.
		sc := l.sched
		sc.Interval += (f.pad + time.Duration(f.n) - 1) / time.Duration(f.n)
		if l.clocked != nil {
			wait, mark, storeNow, err = l.clocked.BookClocked(call, sc, f.n, f.after)
		} else {
			wait, mark, err = l.store.Book(call, sc, f.n, f.after)
		}
	}
	late := ctx.Err() != nil
	cancel()
	cancelCall()
	recv := time.Now()
	switch {
	case err != nil && late:
		err = errNoAnswer(l.timeout)
	case err == nil && wait < f.after-time.Microsecond:
		// A store may count in microseconds; less than that is a fault.
		err = fmt.Errorf("fleet: the store answered a wait of %v for a booking not before %v", wait, f.after)
	}
	wait = max(wait, f.after)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.settle(f, err, recv)
		return
	}
	l.rtt = max(recv.Sub(sent), l.rtt-l.rtt/8)
	// Where the store's now was, on this process's clock, as late as it
	// can have been, and how much earlier it can have been: from a plain
	// Store, when the answer came, and the round trip; from a ClockedStore,
	// the bounds on its clock's offset (see storeClock).
	at, width := recv, recv.Sub(sent)
	if l.clocked != nil {
		at, width = l.clock.local(sent, recv, storeNow)
		l.noteLead(recv.Sub(at))
	}
	b := l.add(wait, mark, f, at, recv, f.pad+l.sched.Interval-width)
	waiters := f.waiters // settle clears them; none if f timed out before
	l.settle(f, nil, recv)
	// A waiter served with a slot given back while f was under way (see
	// release) leaves b's slot unneeded when b is one slot: it goes back to
	// the store, which takes it if b is still the last booking. A larger
	// batch keeps its unused slots, as release does, for the same reason.
	if b.n == 1 && !b.taken[0] && b == l.latest && l.flight == nil {
		for _, w := range waiters {
			if w.got != nil && w.got.b != b {
				l.giveBack(b, 1)
				break
			}
		}
	}
}

// padFor sets f's pad, and grows its batch for it, from the bounds on the
// store's clock as they are now, just before f is sent. The slots may start
// late by up to the width of the bounds when the answer comes: the width
// now, widened for the drift over about a round trip (one that takes longer
// gives up slots instead; see add). The schedule is left free after the
// batch for that width less an interval, the pad: the next booking's slots,
// by whichever process, then keep the schedule's pace from this batch's
// latest start (an interval of lateness is free, since any window of W
// still holds at most W*rate + burst slots where W*rate is whole: see the
// package doc). A full batch spans at least padGrowth pads, up to
// maxGrowth.
func (l *Limiter) padFor(f *flight, now time.Time) {
	w, ok := l.clock.width(now.Add(min(2*l.rtt+10*time.Millisecond, lateAnswer*l.timeout)))
	if l.clocked == nil {
		// A plain Store's now is known only within each round trip:
		// expect the slowest lately.
		w, ok = l.rtt, true
	}
	if !ok {
		return
	}
	f.pad = max(0, w-l.sched.Interval)
	if f.pad > 0 && l.horizon > 0 && f.n >= l.batchCap {
		grown := min(padGrowth*f.pad.Seconds(), maxGrowth.Seconds()) * l.rate
		f.n = max(f.n, int(min(maxBatch, math.Ceil(grown))))
	}
}

// warmUp is a process's first contact with a ClockedStore: it reads the
// store's clock firstReads times at once, twice over, before the first
// booking, so that the booking's pad comes from bounds that its own round
// trip, the reads' first (which open the client's connections, a dial
// and a handshake each), or a single slow answer would make wide. A round
// waits for its reads up to the Timeout, and for its first answer up to
// lateAnswer times that; it fails, as a booking would, when every read of a
// round fails or none answers by then.
func (l *Limiter) warmUp(ctx context.Context) error {
	for round := range warmRounds {
		// The reads may take lateAnswer times the Timeout, as a booking's
		// call may (see book): a client may close a connection whose call
		// its context cut (pgx does), and the next round trips would then
		// open new ones.
		ctx, cancel := context.WithTimeout(ctx, lateAnswer*l.timeout)
		defer cancel()
		timer := time.NewTimer(l.timeout)
		defer timer.Stop()
		// Each read updates the bounds when it comes back; the first
		// round's open the client's connections, so the second's are
		// warm.
		errs := make(chan error, firstReads)
		for range firstReads {
			go func() {
				sent := time.Now()
				storeNow, err := l.clocked.Now(ctx)
				recv := time.Now()
				if err == nil {
					l.mu.Lock()
					if at, _ := l.clock.local(sent, recv, storeNow); round > 0 {
						l.noteLead(recv.Sub(at)) // not the dials'
						l.rtt = max(l.rtt, recv.Sub(sent))
					}
					l.mu.Unlock()
				}
				errs <- err
			}()
		}
		// The round waits for every read up to the Timeout, and past it
		// for the first that comes back, if none has; not past the reads'
		// context, which a client may ignore (go-redis does by default).
		var err error
		ok, due := false, false
	collect:
		for range firstReads {
			select {
			case e := <-errs:
				if e == nil {
					ok = true
				} else {
					err = e
				}
				if ok && due {
					break collect
				}
			case <-timer.C:
				due = true
				if ok {
					break collect
				}
			case <-ctx.Done():
				break collect
			}
		}
		if !ok {
			if err == nil || ctx.Err() != nil {
				return errNoAnswer(l.timeout)
			}
			return err
		}
	}
	return nil
}

// ahead returns how far ahead of now a booking asks for its slots at the
// earliest. A slot placed at the store's now has passed by the time the
// answer is back, and one that passed by more than its margin allows is
// given up (see add): an interval, less the width of the bounds on the
// store's clock, for a batch of one slot. So a booking asks for slots no
// earlier than its answers lately took to come back, less that: they then
// come in time, and below the limit, where the schedule is not booked
// ahead, a slow way back does not make every slot pass and every booking
// book again. On a fast link it asks for none.
func (l *Limiter) ahead(now time.Time) time.Duration {
	allowed := time.Duration(0)
	if w, ok := l.clock.width(now); ok {
		allowed = max(0, l.sched.Interval-w)
	}
	return min(max(0, l.lead-allowed), maxAhead)
}

// noteLead adds a round trip's way back, as this process can tell it (how
// much later than the store's now placed by the clock its answer came), to
// the lead: the largest lately, forgotten by an eighth a round trip.
func (l *Limiter) noteLead(back time.Duration) {
	l.lead = max(back, l.lead-l.lead/8)
}

// add makes a batch of the n slots booked by f, which the store placed wait
// after its now; on this process's clock that now is recv: the time the
// answer arrived, which is no earlier than the store's, so that no slot
// starts before its place; or, from a ClockedStore, the store's time mapped
// onto this process's clock (see storeClock), which is no later, and
// still no earlier than the store's now: late by at most the fastest way
// out plus the fastest way back.
func (l *Limiter) add(wait time.Duration, mark int64, f *flight, recv, arrived time.Time, margin time.Duration) *batch {
	b := &batch{
		first: recv.Add(wait - l.sched.Tolerance),
		floor: recv.Add(f.after),
		every: l.sched.Interval,
		n:     f.n,
		free:  f.n,
		mark:  mark,
		kept:  true,
		taken: make([]bool, f.n),
		refs:  make([]slotRef, f.n),
	}
	for i := range b.refs {
		b.refs[i] = slotRef{b, i}
	}
	// Which slots it may use. Each slot used may start later than its place
	// on the store's schedule by the bounds' width and, if its place passed
	// while the answer was on its way, by as much as that; the pad and an
	// interval cover a margin more than the width, and each slot left unused
	// at the batch's end an interval more (see the package doc).
	if late := arrived.Sub(b.at(0)); late > 0 && margin > 0 {
		// The batch starts later by as much as the margin covers.
		late = min(late, margin)
		b.first, b.floor = b.first.Add(late), b.floor.Add(late)
		margin -= late
	}
	// A slot whose place passed even so starts at once if it passed by at
	// most an interval, which keeps it apart from the batch's later slots;
	// one that passed by more goes unused. Its lateness, or the bounds'
	// widening past the pad (a slow answer, drift, a clock's jump), takes
	// as many slots from the batch's end as the margin lacks, in intervals.
	worst := time.Duration(0)
	for i := range b.n {
		if late := arrived.Sub(b.at(i)); late <= b.every {
			worst = max(worst, late)
		}
	}
	end := b.n
	if short := worst - margin; short > 0 {
		end -= int(min(int64(b.n), int64((short+b.every-1)/b.every)))
	}
	for i := range b.n {
		if i >= end || arrived.Sub(b.at(i)) > b.every {
			b.taken[i] = true
			b.free--
		}
	}
	for b.next < b.n && b.taken[b.next] {
		b.next++
	}
	l.batches = append(l.batches, b)
	l.latest = b
	// Added one by one: a wait far ahead plus the batch's span may not fit
	// in a Duration, while a Time holds them.
	if end := recv.Add(wait).Add(time.Duration(f.n) * l.sched.Interval).Add(f.pad - l.sched.Tolerance); end.After(l.frontier) {
		l.frontier = end
	}
	return b
}

// settle ends f, once: it hands out slots to f's waiters in turn and wakes
// them, and on an error leaves the store alone for a pause.
func (l *Limiter) settle(f *flight, err error, now time.Time) {
	if f.settled {
		return
	}
	f.settled, f.err = true, err
	f.timer.Stop()
	if l.flight == f {
		l.flight = nil
	}
	if err != nil {
		if !now.Before(l.downUntil) {
			l.fbFrom = l.frontier
		}
		l.downUntil, l.downErr = now.Add(pauseAfter(l.fails, rand.Float64())), err
		l.fails++
		if l.onErr != nil {
			go l.onErr(err)
		}
	} else {
		l.fails = 0
		for _, w := range f.waiters {
			if !w.gone {
				// A waiter may take a slot whose place passed while the
				// answer was on its way (one placed by the store's clock),
				// if it is not before the time the waiter asked for: it
				// starts at once, late by no more than this answer was
				// slower than the fastest. Skipping it would book again for
				// the same, on a schedule not booked ahead, for ever.
				if w.got = l.take(w.want, w.want); w.got == nil {
					l.backlog++ // it books again, at once
				}
			}
		}
	}
	f.waiters = nil
	close(f.done)
}

// pauseAfter returns how long to leave the store alone after the failure
// that follows fails failures in a row, from a uniform draw u in [0, 1):
// minPause, growing pauseGrowth times with each failure up to maxPause, of
// which a random half is taken off, so that the processes of a fleet, which
// see a store fail together, do not all ask it again at once. After 6
// failures in a row (208ms at most) it is between 50ms and 100ms.
func pauseAfter(fails int, u float64) time.Duration {
	d := float64(maxPause)
	if fails < 32 {
		d = min(d, float64(minPause)*math.Pow(pauseGrowth, float64(fails)))
	}
	return time.Duration(d/2 + u*d/2)
}

// unavailable serves a booking while the store is unavailable, for cause:
// on the fallback, if there is one. The fallback books no earlier than the
// end of the schedule as this process last saw it, so that the attempts it
// booked on the store before it failed and those of the fallback do not
// add up; and the store's next booking is no earlier than the fallback's
// last, for the same reason (see launch).
func (l *Limiter) unavailable(now time.Time, cause error) (retry.Reservation, error) {
	if l.fallback == nil {
		return retry.Reservation{}, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	at := now
	if l.fbFrom.After(at) {
		at = l.fbFrom
	}
	if l.fbLast.After(at) {
		at = l.fbLast // x/time/rate must never be given a time older than before (golang/go#65508)
	}
	l.fbLast = at
	r := l.fallback.ReserveN(at, 1)
	start := at.Add(r.DelayFrom(at))
	if start.After(l.resume) {
		l.resume = start
	}
	return retry.Reservation{Start: start, Slack: l.fbSlack, Handle: r}, nil
}

// Cancel gives back r, whose attempt will not start: to the process, which
// hands its slot out again if it has not passed, and, when it ends the
// latest batch's unused tail, to the store (see [Limiter]). It never waits
// for the store. A booking made by the fallback goes back to it.
func (l *Limiter) Cancel(r retry.Reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	switch h := r.Handle.(type) {
	case *slotRef:
		l.release(h, now)
	case *rate.Reservation:
		// As retry.RateLimiter does, at the booking's time if that has
		// passed, so that a booking given back at once returns its token;
		// never at a time older than one the limiter was given.
		at := now
		if r.Start.Before(at) {
			at = r.Start
		}
		if l.fbLast.After(at) {
			at = l.fbLast
		}
		h.CancelAt(at)
	}
}

// release gives back the slot ref, which is held.
func (l *Limiter) release(ref *slotRef, now time.Time) {
	b, i := ref.b, ref.i
	if i >= b.n || !b.taken[i] {
		return // given back already
	}
	b.taken[i] = false
	b.free++
	b.next = min(b.next, i)
	if !b.kept && !b.at(i).Before(now) {
		b.kept = true
		l.batches = append(l.batches, b)
	}
	// Only a batch of one slot, the latest, goes back to the store: at low
	// rates, or below the limit, that saves a slow limit an interval. A
	// slot of a larger batch stays with the process, which hands it out
	// again when its place comes near, at no round trip; were the batch's
	// unused tail to go back, a booking by another process since would make
	// the store refuse it, and the whole tail would be lost: callers whose
	// deadlines come before their slots (a schedule booked far ahead) give
	// back slot after slot, and on a slow link the fleet then used a third
	// of its rate. While a booking is under way the slot stays here too:
	// that booking would reach the store before the refund, which the store
	// would then refuse; the booking's waiters take it instead (see book).
	if b != l.latest || b.n != 1 || now.Before(l.downUntil) || l.flight != nil {
		return
	}
	l.giveBack(b, 1)
}

// giveBack takes the last n slots of b, which are unused, from the process
// and refunds them to the store in the background. Until the refund is
// done, the process's next booking waits for it (see book), so that it
// does not reach the store first and make the store refuse the refund.
func (l *Limiter) giveBack(b *batch, n int) {
	if n <= 0 {
		return
	}
	b.n, b.free = b.n-n, b.free-n
	if l.refunding == 0 {
		l.refunded = make(chan struct{})
	}
	l.refunding++
	go l.refund(b.mark, n)
}

// refund gives the last n slots of the booking marked mark back to the
// store, if it is still the last booking; a failure loses them, which is
// safe.
func (l *Limiter) refund(mark int64, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	_, _ = l.store.Refund(ctx, l.sched, mark, n)
	cancel()
	l.mu.Lock()
	if l.refunding--; l.refunding == 0 {
		close(l.refunded)
		l.refunded = nil
	}
	l.mu.Unlock()
}

// maxDrift is the most the store's clock and this process's may drift
// apart, per unit of time: 200ppm, the bound Google's TrueTime assumes for
// its servers' clocks (its paper calls it conservative), and ten times what
// NTP assumes. It widens the bounds on the offset between the clocks as
// time passes, and the pads with them; a clock that drifts faster than
// that, or jumps, shows as an answer whose bounds do not meet the widened
// ones, and the estimate starts again from it.
const maxDrift = 200e-6

// storeClock maps a ClockedStore's time onto this process's monotonic clock.
// Each round trip sent at s and answered at r (local times, in nanoseconds
// from epoch) with the store's time T bounds the offset o = local - store:
// s - T <= o <= r - T. The tightest bounds over the round trips so far,
// widened by maxDrift for the time since, bound it still, and the estimate
// is the latest bound: a slot placed by it never starts before its place on
// the store's schedule, and starts late by at most the bounds' width (the
// fastest way out plus the fastest way back seen, and the drift since),
// which the booking's pad covers (see Limiter.launch). No placing can do
// better with the bounds alone: a round trip measures the way out plus the
// way back, never one alone, and the middle of the bounds (the first
// version of this) places a slot early whenever the way out was the slow
// one. An answer whose bounds do not meet the widened ones means a clock
// jumped: the estimate starts again from it.
type storeClock struct {
	epoch  time.Time // the local origin, with its monotonic reading
	ok     bool
	lo, hi int64 // bounds on the offset, in nanoseconds
	at     int64 // the local time of the last update
}

// local returns, on this process's clock, the latest time the store's now
// of storeNow can have been, from a round trip sent at sent and answered at
// recv and those before it: never later than recv, and never earlier than
// that now was (up to maxDrift, unless a clock jumped).
func (c *storeClock) local(sent, recv time.Time, storeNow int64) (time.Time, time.Duration) {
	s, r := int64(sent.Sub(c.epoch)), int64(recv.Sub(c.epoch))
	lo, hi := s-storeNow, r-storeNow
	if c.ok {
		widen := int64(float64(max(r-c.at, 0))*maxDrift) + 1
		plo, phi := c.lo-widen, c.hi+widen
		if lo <= phi && hi >= plo {
			lo, hi = max(lo, plo), min(hi, phi)
		}
	}
	c.ok, c.lo, c.hi, c.at = true, lo, hi, r
	return c.epoch.Add(time.Duration(storeNow + hi)), time.Duration(hi - lo)
}

// width returns how wide the bounds will be at most by the local time t,
// with the drift they allow for until then, or false before the first round
// trip.
func (c *storeClock) width(t time.Time) (time.Duration, bool) {
	if !c.ok {
		return 0, false
	}
	widen := int64(float64(max(int64(t.Sub(c.epoch))-c.at, 0))*maxDrift) + 1
	return time.Duration(c.hi - c.lo + 2*widen), true
}
