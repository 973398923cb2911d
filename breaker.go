package retry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker is a circuit breaker in the loop: asked before every attempt, the
// first, each retry and each hedge, it stops the attempts to a dependency
// that is failing for everyone, so that calls stop at once instead of
// spending their attempts, their budget and their callers' time on it, and
// lets a few probes through once it may have recovered.
//
// While a Breaker refuses, a call stops before its first attempt with no
// Budget deposit, no Limiter booking and no wait; a call already retrying
// stops at its next attempt, and stops at once, rather than waiting, when
// the retry it plans would start before the breaker may let one through.
// Either way its Reason is an error for which errors.Is(err,
// [ErrBreakerOpen]) holds, with a method Until() time.Time that says when
// the breaker may let an attempt through again, and it keeps the last
// attempt's error. A queue (retryriver) schedules the work for then.
//
// [CircuitBreaker] is the built-in one; examples/breaker adapts
// sony/gobreaker. A Breaker must be safe for concurrent use by any number of
// goroutines. Methods take the current time, as a Budget's do, so that a
// simulation can drive one in virtual time.
type Breaker interface {
	// Allow lets an attempt start at now, and returns the function that
	// tells the breaker how it ended; or refuses it, and returns the time
	// it may let one through again. Exactly one of done and until is
	// non-zero. The loop calls done exactly once, when the attempt has
	// ended, with the time it ended and its error as [Concurrency]'s
	// release receives it: nil for a success, an error that Is
	// context.Canceled when the attempt says nothing of the dependency's
	// health (a 404, a hedge cut, the caller's own cancel), and otherwise a
	// failure the policy would retry, the only kind to count as one.
	Allow(now time.Time) (done func(end time.Time, err error), until time.Time)

	// Until returns, without taking anything, the time from which Allow
	// may let an attempt through, if that is after t; zero otherwise. The
	// loop asks it when it plans a retry for t, to stop at once rather than
	// wait for an attempt that would be refused.
	Until(t time.Time) time.Time
}

// ErrBreakerOpen means the Policy's [Breaker] refused the attempt: the
// dependency has been failing, and the breaker keeps attempts from it until
// it may have recovered. The Reason that Is ErrBreakerOpen has a method
// Until() time.Time that says when that is.
var ErrBreakerOpen = errors.New("retry: circuit breaker open")

// breakerOpen is the Reason of a call that a Breaker refused.
type breakerOpen struct{ until time.Time }

func (e breakerOpen) Error() string {
	return "retry: circuit breaker open until " + e.until.Format(time.RFC3339Nano)
}
func (e breakerOpen) Is(target error) bool { return target == ErrBreakerOpen }

// ErrorType names the reason for OpenTelemetry's error.type.
func (e breakerOpen) ErrorType() string { return "breaker_open" }

// Until returns when the breaker may let an attempt through.
func (e breakerOpen) Until() time.Time { return e.until }

// CircuitBreaker is the built-in [Breaker]. It is closed at first, letting
// every attempt through, and opens when the attempts that ended have failed
// too often: Failures in a row, or, over the last Window, at least
// FailureRatio of at least MinAttempts attempts. While open it refuses every
// attempt for OpenFor; then it is half-open and lets Probes attempts through
// at once. A probe that succeeds counts towards closing it (all Probes must
// succeed), one that fails opens it again for another OpenFor; one that says
// nothing of the dependency (see Breaker.Allow) frees its place for
// another.
//
// Only failures the policy's classifier would retry count: a 404 or the
// caller's own cancel says nothing about the dependency's health, and
// neither counts for it nor against it.
//
// Set the fields before the first Allow and do not change them after. The
// zero value is ready to use: it opens after 5 failures in a row, or at a
// failure ratio of 0.5 over 10s once 20 attempts have ended in it, stays
// open 5s, and lets 1 probe through. A CircuitBreaker is safe for concurrent
// use by any number of goroutines, and must not be copied after first use.
type CircuitBreaker struct {
	// Failures is how many failures in a row open the breaker. 0 means 5;
	// a negative value means that no run of failures opens it.
	Failures int

	// FailureRatio opens the breaker when, over the last Window, at least
	// MinAttempts attempts have ended and this share of them failed. 0
	// means 0.5; a value above 1 means no ratio opens it.
	FailureRatio float64

	// MinAttempts is the fewest attempts over Window for FailureRatio to
	// apply. 0 means 20.
	MinAttempts int

	// Window is the span over which FailureRatio is measured, in ten
	// buckets. 0 means 10s.
	Window time.Duration

	// OpenFor is how long the breaker refuses every attempt once it opens.
	// 0 means 5s.
	OpenFor time.Duration

	// Probes is how many attempts the half-open breaker lets through at
	// once, all of which must succeed for it to close. 0 means 1.
	Probes int

	// OnChange, when set, is told of every change of state, with the
	// states' names ("closed", "open", "half-open") and the time, while
	// the breaker's lock is held: it must not call the breaker.
	OnChange func(from, to string, at time.Time)

	mu        sync.Mutex    // held for every change but a closed breaker's count of a success
	state     atomic.Uint32 // breakerClosed, breakerOpened or breakerHalfOpen; changed with mu held
	ready     atomic.Bool   // done is set
	latest    atomic.Int64  // the latest time Allow was given, in Unix nanoseconds, to a 16th of a tenth of the Window
	width     int64         // a tenth of the Window, in nanoseconds; set with done
	run       atomic.Int64  // failures in a row, closed
	until     time.Time     // open: when it turns half-open
	probing   int           // probes in flight, half-open
	succeeded int           // probes that succeeded, half-open
	buckets   [10]ratioBucket
	gen       uint64 // counts the half-open spells, so that a probe's end from an earlier one counts for nothing
	done      func(time.Time, error)
}

// ratioBucket counts the attempts that ended in one tenth of the Window.
type ratioBucket struct {
	slot          atomic.Int64 // which tenth of time it counts: time / (Window/10); changed with mu held
	ended, failed atomic.Int64
}

// The states of a CircuitBreaker, as State names them.
const (
	breakerClosed uint32 = iota
	breakerOpened
	breakerHalfOpen
)

var breakerStateNames = [...]string{"closed", "open", "half-open"}

// State returns the breaker's state at now: "closed", "open" or
// "half-open".
func (b *CircuitBreaker) State(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return breakerStateNames[b.state.Load()]
}

// Allow lets an attempt through, or refuses it; see [Breaker]. A closed
// breaker answers without a lock.
func (b *CircuitBreaker) Allow(now time.Time) (func(time.Time, error), time.Time) {
	if b.ready.Load() {
		if t := now.UnixNano(); t-b.latest.Load() > b.width/16 {
			b.latest.Store(t) // a store on every call would cost more than the rest of Allow
		}
		if b.state.Load() == breakerClosed {
			return b.done, time.Time{}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ready.Load() {
		b.done = b.ended // once: the func every attempt let through while closed returns
		b.width = int64(b.window() / 10)
		b.latest.Store(now.UnixNano())
		b.ready.Store(true)
	}
	b.advance(now)
	switch b.state.Load() {
	case breakerOpened:
		return nil, b.until
	case breakerHalfOpen:
		if b.probing >= b.probes() {
			// Every probe is out: ask again once they may have answered.
			return nil, now.Add(min(b.openFor(), time.Second))
		}
		b.probing++
		gen := b.gen
		return func(end time.Time, err error) { b.probeEnded(gen, end, err) }, time.Time{}
	}
	return b.done, time.Time{}
}

// Until returns when an attempt may be let through, if that is after t.
func (b *CircuitBreaker) Until(t time.Time) time.Time {
	if b.state.Load() == breakerClosed {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(t)
	if b.state.Load() == breakerOpened {
		return b.until
	}
	return time.Time{}
}

// advance turns an open breaker half-open once its time is over. b.mu is
// held.
func (b *CircuitBreaker) advance(now time.Time) {
	if b.state.Load() == breakerOpened && !now.Before(b.until) {
		b.probing, b.succeeded = 0, 0
		b.gen++
		b.set(breakerHalfOpen, b.until)
	}
}

// ended counts an attempt let through while closed. It counts in the tenth
// of the Window of end, or of the latest time Allow was given if that is
// later, so that a caller may give the time it has rather than read the
// clock again (the loop gives a success its start): a success needs no
// lock.
func (b *CircuitBreaker) ended(end time.Time, err error) {
	if err == nil {
		if b.state.Load() != breakerClosed {
			return // let through before the breaker opened: its news is old
		}
		if b.run.Load() != 0 {
			b.run.Store(0)
		}
		slot := b.slotOf(end)
		if bk := &b.buckets[uint64(slot)%uint64(len(b.buckets))]; bk.slot.Load() == slot {
			// A bucket moved on to a later tenth since the load above takes
			// this success with it: one attempt counted a Window late.
			bk.ended.Add(1)
			return
		}
		b.mu.Lock()
		if bk := b.bucket(slot); bk != nil {
			bk.ended.Add(1)
		}
		b.mu.Unlock()
		return
	}
	if errors.Is(err, context.Canceled) {
		return // says nothing of the dependency
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(end)
	if b.state.Load() != breakerClosed {
		return
	}
	if bk := b.bucket(b.slotOf(end)); bk != nil {
		bk.ended.Add(1)
		bk.failed.Add(1)
	}
	run := b.run.Add(1)
	if (b.failures() > 0 && run >= int64(b.failures())) || b.ratioTripped(end) {
		b.open(end)
	}
}

// probeEnded counts a probe's end, half-open.
func (b *CircuitBreaker) probeEnded(gen uint64, end time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(end)
	if b.state.Load() != breakerHalfOpen || gen != b.gen {
		return // the spell it probed is over
	}
	b.probing--
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		// No news: its place goes to another probe.
	case err != nil:
		b.open(end)
	default:
		if b.succeeded++; b.succeeded >= b.probes() {
			b.run.Store(0)
			for i := range b.buckets {
				bk := &b.buckets[i]
				bk.slot.Store(0)
				bk.ended.Store(0)
				bk.failed.Store(0)
			}
			b.set(breakerClosed, end)
		}
	}
}

// open opens the breaker at now for OpenFor. b.mu is held.
func (b *CircuitBreaker) open(now time.Time) {
	b.until = now.Add(b.openFor())
	b.run.Store(0)
	b.set(breakerOpened, now)
}

// set changes the state, and tells OnChange. b.mu is held.
func (b *CircuitBreaker) set(state uint32, at time.Time) {
	from := b.state.Load()
	b.state.Store(state)
	if b.OnChange != nil && from != state {
		b.OnChange(breakerStateNames[from], breakerStateNames[state], at)
	}
}

// slotOf returns the tenth of the Window of t, or of the latest time Allow
// was given if that is later.
func (b *CircuitBreaker) slotOf(t time.Time) int64 {
	return max(t.UnixNano(), b.latest.Load()) / b.width
}

// bucket returns the bucket of the given tenth of the Window, emptied if it
// last counted an older one; nil if it already counts a later one. b.mu is
// held.
func (b *CircuitBreaker) bucket(slot int64) *ratioBucket {
	bk := &b.buckets[uint64(slot)%uint64(len(b.buckets))]
	switch old := bk.slot.Load(); {
	case old > slot:
		return nil
	case old < slot:
		bk.ended.Store(0)
		bk.failed.Store(0)
		bk.slot.Store(slot)
	}
	return bk
}

// ratioTripped reports whether the failure ratio over the Window opens the
// breaker. b.mu is held.
func (b *CircuitBreaker) ratioTripped(now time.Time) bool {
	ratio := b.FailureRatio
	if ratio == 0 {
		ratio = 0.5
	}
	if ratio > 1 || ratio != ratio {
		return false
	}
	slot := b.slotOf(now)
	var ended, failed int64
	for i := range b.buckets {
		bk := &b.buckets[i]
		if slot-bk.slot.Load() < int64(len(b.buckets)) {
			ended += bk.ended.Load()
			failed += bk.failed.Load()
		}
	}
	minAttempts := b.MinAttempts
	if minAttempts <= 0 {
		minAttempts = 20
	}
	return ended >= int64(minAttempts) && float64(failed) >= ratio*float64(ended)
}

func (b *CircuitBreaker) failures() int {
	switch {
	case b.Failures == 0:
		return 5
	case b.Failures < 0:
		return 0
	}
	return b.Failures
}

func (b *CircuitBreaker) probes() int { return max(b.Probes, 1) }
func (b *CircuitBreaker) window() time.Duration {
	if b.Window < 10 {
		return 10 * time.Second
	}
	return b.Window
}

func (b *CircuitBreaker) openFor() time.Duration {
	if b.OpenFor <= 0 {
		return 5 * time.Second
	}
	return b.OpenFor
}
