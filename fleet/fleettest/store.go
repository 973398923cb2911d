// Package fleettest checks a [fleet.Store] against a real server: the rules
// of the schedule ([TestStore]), and several real processes sharing one
// limit through it ([Drill]); and a [fleet.SlotStore] the same way: the
// rules of its leases ([TestSlotStore]), and real processes sharing one
// concurrency limit, one of them killed while it holds slots
// ([SlotDrill]). The stores of retrypg and retryredis are tested with it; a
// store of your own can be too.
package fleettest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seed93a044d1/retry/fleet"
)

// TestStore checks that stores made by newStore keep a schedule as
// [fleet.Store] says: where bookings land, with after and the tolerance;
// that marks are unique; that a refund is taken only from the last booking;
// and that concurrent bookings never share a slot. newStore must return a
// store on a schedule that nothing else uses (a fresh name), each time it is
// called. The bounds on time allow for slow round trips (up to 250ms), not
// for a store whose clock jumps.
func TestStore(t *testing.T, newStore func(t *testing.T) fleet.Store) {
	t.Helper()
	t.Run("Book", func(t *testing.T) {
		s, sc := newStore(t), fleet.Schedule{Interval: time.Second}
		near(t, book(t, s, sc, 1, 0), 0, "a new schedule books at once")
		near(t, book(t, s, sc, 2, 0), time.Second, "after the first slot")
		near(t, book(t, s, sc, 1, 0), 3*time.Second, "after the two")
		near(t, book(t, s, sc, 1, 10*time.Second), 10*time.Second, "not before after, past the end")
		near(t, book(t, s, sc, 1, 0), 11*time.Second, "the end followed the booking after")
	})
	t.Run("Tolerance", func(t *testing.T) {
		s, sc := newStore(t), fleet.Schedule{Interval: time.Second, Tolerance: 2 * time.Second}
		near(t, book(t, s, sc, 3, 0), 0, "a burst of 3 at once")
		// The fourth slot's place is 3s, and it may start 2s before.
		near(t, book(t, s, sc, 1, 0), 3*time.Second, "the wait is to the slot's place")
		near(t, book(t, s, sc, 1, 500*time.Millisecond), 4*time.Second, "after within the end: no effect")
	})
	t.Run("Refund", func(t *testing.T) {
		s, sc := newStore(t), fleet.Schedule{Interval: time.Second}
		ctx := t.Context()
		m1 := mark(t, s, sc, 1)
		m2 := mark(t, s, sc, 3)
		if m1 == m2 {
			t.Fatalf("two bookings have the same mark %d", m1)
		}
		if ok, err := s.Refund(ctx, sc, m1, 1); err != nil || ok {
			t.Fatalf("Refund of a booking that is not the last = %v, %v; want false, nil", ok, err)
		}
		if ok, err := s.Refund(ctx, sc, m2, 2); err != nil || !ok {
			t.Fatalf("Refund of the last booking's last 2 slots = %v, %v; want true, nil", ok, err)
		}
		if ok, err := s.Refund(ctx, sc, m2, 1); err != nil || !ok {
			t.Fatalf("a second Refund of the last booking = %v, %v; want true, nil (earlier refunds do not count)", ok, err)
		}
		near(t, book(t, s, sc, 1, 0), time.Second, "the schedule ends after the first slot of each booking")
		if ok, err := s.Refund(ctx, sc, m2, 1); err != nil || ok {
			t.Fatalf("Refund after another booking = %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		// Slots 10s apart: a round trip would have to take 5s to blur them.
		s, sc := newStore(t), fleet.Schedule{Interval: 10 * time.Second}
		const goroutines, each = 8, 4
		t0 := time.Now()
		var mu sync.Mutex
		var places []time.Duration
		marks := map[int64]bool{}
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range each {
					sent := time.Now()
					wait, m, err := s.Book(t.Context(), sc, 1, 0)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					places = append(places, sent.Sub(t0)+wait)
					marks[m] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(marks) != goroutines*each {
			t.Errorf("%d distinct marks for %d bookings", len(marks), goroutines*each)
		}
		slices.Sort(places)
		for i, p := range places {
			if d := p - time.Duration(i)*sc.Interval; d < -sc.Interval/2 || d > sc.Interval/2 {
				t.Fatalf("booked slots (from the start) %v: slot %d is at %v, want %v", places, i, p, time.Duration(i)*sc.Interval)
			}
		}
	})
	t.Run("FarAhead", func(t *testing.T) {
		// The longest interval a fleet.Limiter asks for (a near-zero rate,
		// as rate.Every(math.MaxInt64) is): the schedule's end goes far
		// ahead, and no wait wraps to a negative duration or fails. A store
		// may stop the end at a limit of its own, decades ahead, so that
		// the waits then shrink as its clock goes on, by the test's own
		// time.
		const interval = time.Duration(1) << 60
		s, sc := newStore(t), fleet.Schedule{Interval: interval, Tolerance: interval}
		near(t, book(t, s, sc, 1, 0), 0, "the first slot at once")
		near(t, book(t, s, sc, 1, 0), interval, "the second a whole interval on, to start at once with the tolerance")
		prev := interval - slop
		for i := range 8 {
			w := book(t, s, sc, 1, interval)
			if w < prev-slop {
				t.Fatalf("booking %d: wait %v, earlier than the one before (%v)", i+3, w, prev)
			}
			prev = w
		}
	})
	t.Run("Clock", func(t *testing.T) {
		s := newStore(t)
		c, ok := s.(fleet.ClockedStore)
		if !ok {
			t.Skip("not a fleet.ClockedStore")
		}
		sc := fleet.Schedule{Interval: time.Second}
		var prev int64
		for i := range 3 {
			_, _, now, err := c.BookClocked(t.Context(), sc, 1, 0)
			if err != nil {
				t.Fatalf("BookClocked: %v", err)
			}
			if now < prev {
				t.Errorf("booking %d: the store's clock went back from %d to %d", i, prev, now)
			}
			prev = now
			// Now reads the same clock, and books nothing.
			sent := time.Now()
			now, err = c.Now(t.Context())
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			if now < prev {
				t.Errorf("Now after booking %d: the store's clock went back from %d to %d", i, prev, now)
			}
			if d := time.Duration(now - prev); d > time.Since(sent)+slop {
				t.Errorf("Now after booking %d: %v after the booking's now, more than the round trips took", i, d)
			}
			prev = now
		}
		if w := book(t, s, sc, 1, 0); w > 3*time.Second+slop {
			t.Errorf("the fourth slot waits %v; want 3s less the time the test took: Now booked slots", w)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := c.Now(ctx); err == nil {
			t.Error("Now with a cancelled context succeeded")
		}
		// The store's clock need not be the test's; one on this machine is.
		t.Logf("the store's clock is %v ahead of the test's", time.Duration(prev-time.Now().UnixNano()))
	})
	t.Run("Canceled", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := s.Book(ctx, fleet.Schedule{Interval: time.Second}, 1, 0); err == nil {
			t.Error("Book with a cancelled context succeeded")
		}
	})
}

// slop is how far a booking may land from where it should: the time the
// round trips of the test took, which a loaded machine stretches.
const slop = 250 * time.Millisecond

func book(t *testing.T, s fleet.Store, sc fleet.Schedule, n int, after time.Duration) time.Duration {
	t.Helper()
	wait, _, err := s.Book(t.Context(), sc, n, after)
	if err != nil {
		t.Fatalf("Book(%d, %v): %v", n, after, err)
	}
	if wait < after-time.Microsecond {
		t.Fatalf("Book(%d, %v) = %v, earlier than after", n, after, wait)
	}
	return wait
}

func mark(t *testing.T, s fleet.Store, sc fleet.Schedule, n int) int64 {
	t.Helper()
	_, m, err := s.Book(t.Context(), sc, n, 0)
	if err != nil {
		t.Fatalf("Book(%d): %v", n, err)
	}
	return m
}

// near checks that a wait is want, less the time the test has taken since
// (at most slop).
func near(t *testing.T, got, want time.Duration, what string) {
	t.Helper()
	if got > want+time.Millisecond || got < want-slop {
		t.Errorf("%s: wait %v, want %v (less up to %v for the test's own time)", what, got, want, slop)
	}
}
