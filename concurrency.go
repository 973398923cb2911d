package retry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Concurrency bounds how many attempts are in flight at once across every
// call that shares it: first attempts, retries and hedges alike. A rate
// limit does not bound that: when a dependency slows down, the same rate
// means more requests in flight, its queues grow and its latency climbs
// until everything times out. A Concurrency holds each attempt to a slot,
// taken just before the attempt starts and given back as it ends.
//
// [ConcurrencyLimit] is a fixed limit for one process; package adaptive
// learns the limit from latency and throttling; the modules retrypg and
// retryredis lease slots shared by a fleet of processes.
//
// The loop takes a slot last, once the attempt's wait, its Limiter booking
// and its Budget are settled and the attempt would start at once: a slot is
// then held only for the attempt itself, never through a backoff, and an
// attempt that waits for a slot does not keep a booking that would let it
// start late, together with others, above the Limiter's rate (a booking
// that the wait for a slot made too late is booked again, holding the slot).
// The [Breaker], asked last of all, never lets through an attempt that
// found no slot. [Policy.Admit] takes a slot the same way for work run
// outside Do.
//
// A Concurrency must be safe for concurrent use by any number of
// goroutines.
type Concurrency interface {
	// Acquire waits for a slot for one attempt and returns the function
	// that gives it back. ctx is the caller's, and by, when not zero, the
	// latest time the attempt may start (the caller's deadline less
	// Policy.MinAttemptTime): Acquire must not wait past either. A by that
	// has already come asks for a slot free now: Acquire takes one only if
	// it need not wait for it (a Concurrency of a store asks it once). The
	// loop asks so for a hedge, which is worth its load only if it starts
	// on time, and on the goroutine that runs the hedged call's schedule:
	// such an Acquire must return at once, or after one round trip. An error
	// means no slot, and the call stops with it as its Reason, keeping the
	// last attempt's error: ctx's cause when ctx ended, [ErrNoSlot] when
	// by passed or a bounded queue was full, or the Concurrency's own (a
	// store that is down).
	//
	// The loop calls release exactly once, when the attempt has ended,
	// however it ended, with how long it ran and err: nil for a success;
	// an error for which errors.Is(err, context.Canceled) holds when the
	// attempt says nothing of the dependency's health (the loop cut it, a
	// hedge won, the caller's context ended, fn panicked, or the policy's
	// classifier does not retry its error, a 404 say; the attempt's own
	// error, if any, stays reachable with errors.As); otherwise the
	// attempt's error, one the policy would retry. A Concurrency that
	// learns must not learn from the first kind.
	Acquire(ctx context.Context, by time.Time) (release func(d time.Duration, err error), err error)
}

// ErrNoSlot means the attempt found no slot in the Policy's [Concurrency]
// before the latest time it could start (the caller's deadline less
// MinAttemptTime), or that the queue of attempts waiting for one was full.
var ErrNoSlot error = noSlot{}

type noSlot struct{}

func (noSlot) Error() string { return "retry: no concurrency slot" }

// ErrorType names the reason for OpenTelemetry's error.type.
func (noSlot) ErrorType() string { return "no_slot" }

// ConcurrencyLimit is a [Concurrency] of a fixed number of slots in one
// process, given out first come, first served.
//
// Set Slots, and Queue if wanted, before the first Acquire and do not change
// them after. The zero value has no slot: every attempt stops with
// [ErrNoSlot] (a forgotten Slots fails closed, at once). A ConcurrencyLimit
// is safe for concurrent use by any number of goroutines, and must not be
// copied after first use.
//
// An attempt that finds every slot taken waits, in arrival order, until
// one is given back, the caller's context ends, or it could no longer
// start in time (see [Concurrency]). A slot given back goes to the longest
// waiter at once: a newcomer never takes it first.
type ConcurrencyLimit struct {
	// Slots is the most attempts in flight at once. 0 or less means none.
	Slots int

	// Queue bounds how many attempts may wait for a slot: one that finds
	// Queue waiting already stops at once with ErrNoSlot, so that a
	// dependency that has slowed sheds load instead of building a backlog
	// of waiting callers. 0 means no bound; a negative Queue means no wait
	// at all: an attempt without a free slot stops at once.
	Queue int

	mu       sync.Mutex    // held to queue, to give up and to hand slots on; not to take or give back a slot when no one waits
	inFlight atomic.Int64  // slots taken
	waiting  atomic.Int64  // len(waiters), read without the lock
	waiters  []*slotWaiter // in arrival order; a waiter given a slot is removed
	ready    atomic.Bool   // release is set
	release  func(time.Duration, error)
}

// slotWaiter is one attempt waiting for a slot. ready is closed when it is
// given one.
type slotWaiter struct {
	ready chan struct{}
	given bool
}

// tryAcquire takes a free slot when no one waits for one, without a lock,
// and returns its release; nil when it cannot.
func (l *ConcurrencyLimit) tryAcquire() func(time.Duration, error) {
	if !l.ready.Load() || l.waiting.Load() != 0 {
		return nil
	}
	for {
		n := l.inFlight.Load()
		if n >= int64(l.Slots) {
			return nil
		}
		if l.inFlight.CompareAndSwap(n, n+1) {
			return l.release
		}
	}
}

// Acquire takes a slot, or waits for one; see [Concurrency].
func (l *ConcurrencyLimit) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	if rel := l.tryAcquire(); rel != nil {
		return rel, nil
	}
	l.mu.Lock()
	if !l.ready.Load() {
		l.release = l.giveBack // once: the func every slot returns, without an allocation per slot
		l.ready.Store(true)
	}
	if l.Slots <= 0 || l.Queue < 0 || (l.Queue > 0 && len(l.waiters) >= l.Queue) {
		if l.Slots > 0 && len(l.waiters) == 0 && l.takeFree() {
			l.mu.Unlock()
			return l.release, nil
		}
		l.mu.Unlock()
		return nil, ErrNoSlot
	}
	var stop <-chan time.Time
	if !by.IsZero() {
		d := time.Until(by)
		if d <= 0 {
			ok := len(l.waiters) == 0 && l.takeFree()
			l.mu.Unlock()
			if ok {
				return l.release, nil
			}
			return nil, ErrNoSlot
		}
		t := time.NewTimer(d)
		defer t.Stop()
		stop = t.C
	}
	w := &slotWaiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.waiting.Add(1)
	// A slot given back since tryAcquire, by one who saw no one waiting,
	// is found here: giveBack lowers inFlight before it reads waiting, and
	// this raises waiting before handOn reads inFlight.
	l.handOn()
	l.mu.Unlock()

	var err error
	select {
	case <-w.ready:
		return l.release, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-stop:
		err = ErrNoSlot
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.given {
		// Given a slot as it gave up: pass it on.
		l.inFlight.Add(-1)
		l.handOn()
		return nil, err
	}
	for i, o := range l.waiters {
		if o == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			l.waiting.Add(-1)
			break
		}
	}
	return nil, err
}

// takeFree takes a free slot, if there is one.
func (l *ConcurrencyLimit) takeFree() bool {
	for {
		n := l.inFlight.Load()
		if n >= int64(l.Slots) {
			return false
		}
		if l.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// giveBack is the release of every slot.
func (l *ConcurrencyLimit) giveBack(time.Duration, error) {
	l.inFlight.Add(-1)
	if l.waiting.Load() != 0 {
		l.mu.Lock()
		l.handOn()
		l.mu.Unlock()
	}
}

// handOn gives free slots to the longest waiters. l.mu is held.
func (l *ConcurrencyLimit) handOn() {
	for len(l.waiters) > 0 && l.takeFree() {
		w := l.waiters[0]
		l.waiters[0] = nil
		l.waiters = l.waiters[1:]
		l.waiting.Add(-1)
		w.given = true
		close(w.ready)
	}
}

// InFlight returns the number of slots taken now.
func (l *ConcurrencyLimit) InFlight() int { return int(l.inFlight.Load()) }

// Limit returns the most attempts in flight at once: Slots, or 0.
func (l *ConcurrencyLimit) Limit() int { return max(l.Slots, 0) }

// Waiting returns the number of attempts waiting for a slot now.
func (l *ConcurrencyLimit) Waiting() int { return int(l.waiting.Load()) }
