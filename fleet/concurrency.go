package fleet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	randv2 "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
)

// SlotStore keeps the leases of one concurrency limit shared by a fleet (a
// sorted set in Redis, rows of a table in PostgreSQL): each is an id and an
// expiry on the store's own clock, so that a process that dies holds its
// slots only until their leases run out. A [Concurrency] calls it; users need
// it only to write a store of their own.
//
// Only durations cross the wire: each expiry is set from the store's own
// now, so processes whose clocks disagree share one limit.
//
// A SlotStore must be safe for concurrent use. Each method is one round trip
// that ends, with an error, when ctx does (the Concurrency also stops
// waiting for a store that does not).
type SlotStore interface {
	// Lease adds the lease id, to expire lease after the store's now, if
	// fewer than limit leases are live, as one atomic step that first drops
	// every lease whose expiry has passed by the store's clock. It reports
	// whether it added id. A Concurrency never asks twice for one id.
	Lease(ctx context.Context, id string, limit int, lease time.Duration) (ok bool, err error)

	// Renew moves the expiry of each lease of ids that the store still
	// holds to lease after its now, and returns those it no longer held. It
	// never adds one: a lease dropped once it expired stays gone, since a
	// Lease may have given its place to another. (One that expired but was
	// not dropped yet may be renewed: no Lease has counted it out.)
	Renew(ctx context.Context, ids []string, lease time.Duration) (lost []string, err error)

	// Release drops the lease id. A lease the store no longer holds is no
	// error.
	Release(ctx context.Context, id string) error
}

// Concurrency is a [retry.Concurrency] whose slots are shared by every
// process that leases them on the same [SlotStore]: the whole fleet holds at
// most its limit of attempts in flight at once, retries and hedges included,
// however many processes there are. Make one with [NewConcurrency]; the
// modules retrypg and retryredis make one on their stores. The zero
// Concurrency is not usable: its Acquire fails with an error that says so.
//
// Each slot is a lease in the store, taken in one atomic round trip (drop
// the expired leases, then add one if fewer than the limit remain) and
// dropped by the release that the loop calls when the attempt ends. While
// the process holds leases, one goroutine of the Concurrency renews them
// all, in one round trip, every third of the lease; so only a process that
// died (or could not reach the store for two thirds of a lease) loses its
// slots, and those come back to the fleet at most a lease after its last
// renewal. A lease that ran out while its attempt still ran (the store away
// for that long, or the process stalled) is not taken again: its attempt
// goes on uncounted, and Options.OnStoreError hears of it.
//
// A release returns at once: the lease is dropped in the background, within
// Options.Timeout whether or not the caller's context has ended, and a
// lease whose drop fails runs out on its own, no later than a lease from
// its last renewal.
//
// Acquires ask the store side by side while it has room. An attempt that
// finds no slot free waits: within a process, one Acquire at a time then
// asks the store (the others wait in turn behind it, so that a process asks
// no more often with many waiting than with one), again after
// a pause that starts at 5ms and doubles up to 50ms, less a random part of
// up to half, and at once when a slot of its own process is released. So
// slots are not given out in arrival order across the fleet: a freed slot
// goes to the first process that asks after it. A process never asks the
// store for more slots than the whole limit: an attempt beyond that waits
// for one of its own process's slots instead. The wait ends with the
// caller's context (Acquire returns [context.Cause]) or when the attempt
// could no longer start in time ([retry.ErrNoSlot]).
//
// When the store does not answer within Options.Timeout, or fails, the
// Concurrency fails closed (Acquire returns an error that [errors.Is]
// ErrUnavailable and wraps the cause), or, with Options.Fallback, admits
// attempts on a local limit of that share of the limit, rounded down but at
// least 1: 1/N for N processes keeps the fleet at the limit, and 1 lets each
// process go on up to the whole limit (fail open, bounded). The local limit
// counts the attempts still running on leases taken before the store
// failed, so a process never has more than it in flight while the store is
// away. Attempts admitted locally are not in the store: once it is back,
// they run on beside the leases taken since, until they end. As for a
// [Limiter], the store is then left alone for a pause (10ms, growing 1.5
// times with each failure in a row up to 100ms, less a random part of up to
// half), after which one Acquire asks again and the others meanwhile are
// served as during the pause. A lease whose answer came too late is
// released in the background.
//
// A Concurrency is safe for concurrent use by any number of goroutines.
// Every process must use the same limit and lease for a name.
type Concurrency struct {
	store   SlotStore
	limit   int
	lease   time.Duration
	renewal time.Duration // lease/3
	timeout time.Duration
	local   int // the fallback's limit; 0 fails closed
	onErr   func(error)
	prefix  string // lease ids are prefix and a counter
	seq     atomic.Uint64

	gate chan struct{} // a token for each slot this process holds or asks for: at most limit
	turn chan struct{} // held by the one Acquire of this process that asks the store
	kick chan struct{} // a slot of this process came free: the Acquire that holds the turn asks again at once

	mu        sync.Mutex
	held      map[string]struct{} // the leases held, their attempts running
	fallback  int                 // slots admitted by the fallback, their attempts running
	renewing  chan struct{}       // closed to stop the renewing goroutine; nil when none runs
	downUntil time.Time           // while the store is left alone
	downErr   error
	fails     int  // failed round trips in a row
	full      bool // the store had no room at its last answer: Acquires wait in turn
}

const (
	// minPoll and maxPoll bound the pause before an Acquire that found the
	// store full asks again: short at first, so that a slot freed by
	// another process is taken soon, and at most 20 times a second per
	// process while the wait goes on.
	minPoll = 5 * time.Millisecond
	maxPoll = 50 * time.Millisecond

	// minLease is the shortest lease: renewing a shorter one, three times
	// per lease, would be most of a process's round trips.
	minLease = time.Millisecond
)

// errZeroConcurrency is what the zero Concurrency answers.
var errZeroConcurrency = errors.New("fleet: Concurrency not made by NewConcurrency")

// NewConcurrency returns a Concurrency of limit slots, each held as a lease
// of lease in store (renewed while its attempt runs), shared by every
// process that leases on the same store; opts may be nil: see [Options] for
// the defaults (each round trip 100ms at most; fail closed when the store
// is slow or down). Options.Horizon does not apply to a Concurrency.
//
// Choose a lease well above the store's slowest round trip: it is how long
// the slots of a process that dies stay taken, and a process that cannot
// renew within two thirds of it loses its slots to the fleet.
//
// It fails, with an error that names the field, for a nil store, a limit
// below 1, a lease below 1ms (0 and negative included), a negative
// Options.Timeout, or an Options.Fallback outside [0, 1]: input that would
// otherwise show only as every call failing.
func NewConcurrency(store SlotStore, limit int, lease time.Duration, opts *Options) (*Concurrency, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case store == nil:
		return nil, errors.New("fleet: store is nil")
	case limit < 1:
		return nil, fmt.Errorf("fleet: limit %d admits no attempt: it must be at least 1", limit)
	case lease < minLease:
		return nil, fmt.Errorf("fleet: lease %v is too short: it must be at least %v", lease, minLease)
	case o.Timeout < 0:
		return nil, fmt.Errorf("fleet: Options.Timeout %v is negative (0 means the default, 100ms)", o.Timeout)
	case !(o.Fallback >= 0 && o.Fallback <= 1):
		return nil, fmt.Errorf("fleet: Options.Fallback %v is not a share of the limit between 0 and 1", o.Fallback)
	}
	c := &Concurrency{
		store:   store,
		limit:   limit,
		lease:   lease,
		renewal: lease / 3,
		timeout: o.Timeout,
		onErr:   o.OnStoreError,
		prefix:  rand.Text()[:16] + "-",
		gate:    make(chan struct{}, limit),
		turn:    make(chan struct{}, 1),
		kick:    make(chan struct{}, 1),
		held:    map[string]struct{}{},
	}
	if c.timeout == 0 {
		c.timeout = defaultTimeout
	}
	if o.Fallback > 0 {
		c.local = max(1, int(math.Floor(float64(limit)*o.Fallback)))
	}
	return c, nil
}

// Acquire takes a slot of the fleet's limit for one attempt, or waits for
// one, and returns the function that gives it back (see [retry.Concurrency]
// for how the loop calls it, and [Concurrency] for how it waits). It stops
// with context.Cause(ctx) when ctx ends, with [retry.ErrNoSlot] when by (if
// not zero) passes first, and with an error that [errors.Is]
// ErrUnavailable when the store fails and the Concurrency fails closed. A
// by that has already come (a hedge's) asks the store once, and takes a
// slot only if one is free then.
func (c *Concurrency) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	if c == nil || c.store == nil {
		return nil, errZeroConcurrency
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	var stop <-chan time.Time
	if !by.IsZero() {
		d := time.Until(by)
		if d <= 0 {
			return c.tryNow(ctx)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		stop = t.C
	}
	// The process's own gate: never more slots asked for or held than the
	// whole limit.
	select {
	case c.gate <- struct{}{}:
	default:
		select {
		case c.gate <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-stop:
			return nil, retry.ErrNoSlot
		}
	}
	release, err := c.acquire(ctx, stop)
	if err != nil {
		<-c.gate
	}
	return release, err
}

// tryNow takes a slot only if one is free now, for an attempt that must not
// wait for one (a hedge, whose by is its start): the store is asked once,
// even if its last answer said it was full (slots may have come free since,
// and no waiting Acquire may be asking), and while it is away the fallback
// serves as for any Acquire.
func (c *Concurrency) tryNow(ctx context.Context) (func(time.Duration, error), error) {
	select {
	case c.gate <- struct{}{}:
	default:
		return nil, retry.ErrNoSlot // this process holds or asks for the whole limit
	}
	release, err := c.tryGated(ctx)
	if err != nil {
		<-c.gate
	}
	return release, err
}

func (c *Concurrency) tryGated(ctx context.Context) (func(time.Duration, error), error) {
	c.mu.Lock()
	failing := c.fails > 0
	c.mu.Unlock()
	if failing {
		if release, err, done := c.unavailable(); done {
			return release, err
		}
		return nil, retry.ErrNoSlot
	}
	id, ok, err, gaveUp := c.ask(ctx, nil)
	switch {
	case gaveUp != nil:
		return nil, gaveUp
	case err != nil:
		c.failed(err)
		if release, err, done := c.unavailable(); done {
			return release, err
		}
		return nil, retry.ErrNoSlot
	case ok:
		return c.holding(id), nil
	}
	c.answered(false)
	return nil, retry.ErrNoSlot
}

// acquire takes a slot once the process's gate let it through: from the
// store, or while the store is away from the fallback, or fails.
func (c *Concurrency) acquire(ctx context.Context, stop <-chan time.Time) (func(time.Duration, error), error) {
	var w waiting
	defer w.stop()
	haveTurn := false
	defer func() {
		if haveTurn {
			<-c.turn
		}
	}()
	poll := minPoll
	for {
		now := time.Now()
		c.mu.Lock()
		failing, pauseEnd := c.fails > 0, c.downUntil
		c.mu.Unlock()
		if failing && !haveTurn {
			haveTurn = c.tryTurn()
		}
		if failing && (!haveTurn || now.Before(pauseEnd)) {
			// Left alone for a pause, or another Acquire is asking it
			// whether it is back: served as while it is away.
			if release, err, done := c.unavailable(); done {
				return release, err
			}
			// The fallback is full: wait for a slot of this process, or for
			// the pause's end.
			d := pauseEnd.Sub(now)
			if d <= 0 || !haveTurn {
				d = minPoll
			}
			if err := w.sleep(ctx, stop, c.kick, d); err != nil {
				return nil, err
			}
			continue
		}
		if !haveTurn {
			c.mu.Lock()
			full := c.full
			c.mu.Unlock()
			if !full {
				// The store had room at its last answer: ask at once, beside
				// this process's other Acquires.
				id, ok, err, gaveUp := c.ask(ctx, stop)
				switch {
				case gaveUp != nil:
					return nil, gaveUp
				case err != nil:
					c.failed(err)
				case ok:
					return c.holding(id), nil
				default:
					c.answered(false)
				}
				continue
			}
			if !c.tryTurn() {
				select {
				case c.turn <- struct{}{}:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				case <-stop:
					return nil, retry.ErrNoSlot
				}
			}
			haveTurn = true
			continue // the store may have failed meanwhile
		}
		id, ok, err, gaveUp := c.ask(ctx, stop)
		switch {
		case gaveUp != nil:
			return nil, gaveUp
		case err != nil:
			c.failed(err)
			continue
		case ok:
			return c.holding(id), nil
		}
		c.answered(false)
		// The fleet's slots are all taken: ask again after a pause, or at
		// once when one of this process's comes free.
		if err := w.sleep(ctx, stop, c.kick, poll/2+time.Duration(randv2.Int64N(int64(poll/2)+1))); err != nil {
			return nil, err
		}
		poll = min(2*poll, maxPoll)
	}
}

// tryTurn takes the turn to ask the store, if no other Acquire has it.
func (c *Concurrency) tryTurn() bool {
	select {
	case c.turn <- struct{}{}:
		return true
	default:
		return false
	}
}

// ask asks the store for a lease, and waits for the answer no longer than
// Options.Timeout, the caller's context or its time to start. The call
// itself may go on, in the background, up to lateAnswer times the Timeout,
// as for a Limiter, so that a client does not lose its connection to a
// round trip only a little slow; a lease that it takes after the Acquire
// stopped waiting is released. err is the store's failure; gaveUp, the
// reason the Acquire stopped waiting for the answer: the caller's context
// or its time to start.
func (c *Concurrency) ask(ctx context.Context, stop <-chan time.Time) (id string, ok bool, err, gaveUp error) {
	id = c.prefix + strconv.FormatUint(c.seq.Add(1), 36)
	type answer struct {
		ok  bool
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		call, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateAnswer*c.timeout)
		ok, err := c.store.Lease(call, id, c.limit, c.lease)
		cancel()
		ch <- answer{ok, err}
	}()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case a := <-ch:
		return id, a.ok, a.err, nil
	case <-t.C:
		err = errNoAnswer(c.timeout)
	case <-ctx.Done():
		gaveUp = context.Cause(ctx)
	case <-stop:
		gaveUp = retry.ErrNoSlot
	}
	go func() {
		if a := <-ch; a.ok {
			c.drop(id)
		}
	}()
	return id, false, err, gaveUp
}

// answered records that the store answered, with room for a lease or
// without: it is well.
func (c *Concurrency) answered(room bool) {
	c.mu.Lock()
	c.fails, c.full = 0, !room
	c.mu.Unlock()
}

// failed leaves the store alone for a pause after a failed round trip (see
// pauseAfter), and reports the cause.
func (c *Concurrency) failed(err error) {
	c.mu.Lock()
	c.downUntil, c.downErr = time.Now().Add(pauseAfter(c.fails, randv2.Float64())), err
	c.fails++
	c.mu.Unlock()
	c.report(err)
}

// unavailable serves an Acquire while the store is away: it fails closed,
// or takes a slot of the fallback, or, when the fallback's slots are all
// taken (done false), neither.
func (c *Concurrency) unavailable() (release func(time.Duration, error), err error, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local == 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, c.downErr), true
	}
	if len(c.held)+c.fallback >= c.local {
		return nil, nil, false
	}
	c.fallback++
	s := &slot{c: c}
	return s.release, nil, true
}

// holding records the lease id, just taken, as held: the store answered,
// so it is well. It starts the renewing goroutine if none runs.
func (c *Concurrency) holding(id string) func(time.Duration, error) {
	c.mu.Lock()
	c.fails, c.full = 0, false
	c.held[id] = struct{}{}
	if c.renewing == nil {
		c.renewing = make(chan struct{})
		go c.renew(c.renewing)
	}
	c.mu.Unlock()
	s := &slot{c: c, id: id}
	return s.release
}

// slot is one slot that an Acquire gave out: a lease, or one of the
// fallback's (id empty).
type slot struct {
	c    *Concurrency
	id   string
	done atomic.Bool
}

// release gives the slot back, once however often it is called: the
// fallback's at once, a lease by dropping it from the store in the
// background.
func (s *slot) release(time.Duration, error) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	c := s.c
	c.mu.Lock()
	if s.id == "" {
		c.fallback--
	} else {
		delete(c.held, s.id) // no longer renewed
		if len(c.held) == 0 && c.renewing != nil {
			close(c.renewing) // nothing left to renew: no goroutine stays behind
			c.renewing = nil
		}
	}
	c.mu.Unlock()
	if s.id == "" {
		<-c.gate
		c.wake()
		return
	}
	go func() {
		c.drop(s.id)
		<-c.gate
		c.wake()
	}()
}

// drop releases the lease id in the store, and returns once it is done or
// Options.Timeout has passed: the call may go on, in the background, up to
// lateAnswer times the Timeout, for a client that ignores its context. A
// lease whose release fails runs out on its own.
func (c *Concurrency) drop(id string) {
	done := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), lateAnswer*c.timeout)
		err := c.store.Release(ctx, id)
		cancel()
		if err != nil {
			c.report(fmt.Errorf("fleet: releasing a lease: %w", err))
		}
		close(done)
	}()
	t := time.NewTimer(c.timeout)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
}

// wake tells the Acquire that holds the turn, if any, that a slot of this
// process came free.
func (c *Concurrency) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// renew renews the held leases every third of the lease, in one round trip,
// until stop is closed, when the process holds none.
func (c *Concurrency) renew(stop <-chan struct{}) {
	t := time.NewTimer(c.renewal)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		}
		c.mu.Lock()
		ids := make([]string, 0, len(c.held))
		for id := range c.held {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		// A renewal may take up to a third of the lease: the next one is
		// then due, and the leases have another third left.
		ctx, cancel := context.WithTimeout(context.Background(), c.renewal)
		lost, err := c.store.Renew(ctx, ids, c.lease)
		cancel()
		if err != nil {
			c.report(fmt.Errorf("fleet: renewing %d leases: %w", len(ids), err))
		} else if n := c.stillHeld(lost); n > 0 {
			c.report(fmt.Errorf("fleet: %d leases ran out while their attempts ran: the store was away, or the process stalled, for longer than the lease", n))
		}
		t.Reset(c.renewal)
	}
}

// stillHeld returns how many of ids are held: leases that ran out while
// their attempts ran, rather than ones released during the renewal.
func (c *Concurrency) stillHeld(ids []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := c.held[id]; ok {
			n++
		}
	}
	return n
}

// report passes err to Options.OnStoreError, if set, on a goroutine of its
// own.
func (c *Concurrency) report(err error) {
	if c.onErr != nil {
		go c.onErr(err)
	}
}

// waiting is the one timer of an Acquire's waits.
type waiting struct{ t *time.Timer }

// sleep waits d, or until kick, ctx ends or stop fires, and returns the
// reason to stop waiting if one came.
func (w *waiting) sleep(ctx context.Context, stop <-chan time.Time, kick <-chan struct{}, d time.Duration) error {
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	select {
	case <-w.t.C:
	case <-kick:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-stop:
		return retry.ErrNoSlot
	}
	return nil
}

func (w *waiting) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}
