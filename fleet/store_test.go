package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/fleet"
)

// memStore is a real Store held in memory: the GCRA schedule as the package
// doc states it, on the clock of the test (virtual, inside a synctest
// bubble). latency is spent before and after the store reads its clock, as
// a network would; down makes every call fail, hang makes it never answer
// (until its context ends).
type memStore struct {
	mu       sync.Mutex
	tat      time.Time
	seq      int64
	latency  time.Duration
	jitter   time.Duration // each leg takes latency plus a uniform draw from [0, jitter)
	outOnly  bool          // jitter on the way out only: a link that delays requests, a store that queues them
	backOnly bool          // jitter on the way back only: slow replies, a client that reads them late
	down     error
	hang     bool
	books    int             // round trips that booked
	slots    int             // slots booked
	refunds  int             // refunds taken
	asks     []time.Time     // when each Book was called, answered or not
	places   []time.Time     // each booking's base: the place of its first slot, less the tolerance
	spans    []time.Duration // how far each booking moved the schedule's end on from its base
	reads    int             // calls to Now that read the clock
}

// newLimiter returns fleet.New's Limiter, or ends the test.
func newLimiter(t testing.TB, s fleet.Store, r rate.Limit, burst int, opts *fleet.Options) *fleet.Limiter {
	t.Helper()
	l, err := fleet.New(s, r, burst, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var errStoreDown = errors.New("connection refused")

func (s *memStore) set(f func(s *memStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *memStore) travel(ctx context.Context, back bool) error {
	s.mu.Lock()
	down, hang, latency, jitter := s.down, s.hang, s.latency, s.jitter
	if back && s.outOnly || !back && s.backOnly {
		jitter = 0
	}
	s.mu.Unlock()
	if down != nil {
		return down
	}
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if jitter > 0 {
		latency += rand.N(jitter)
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *memStore) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	wait, mark, _, err := s.BookClocked(ctx, sc, n, after)
	return wait, mark, err
}

func (s *memStore) BookClocked(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	s.mu.Lock()
	s.asks = append(s.asks, time.Now())
	s.mu.Unlock()
	if err := s.travel(ctx, false); err != nil {
		return 0, 0, 0, err
	}
	s.mu.Lock()
	now := time.Now()
	base := now.Add(after)
	if s.tat.After(base) {
		base = s.tat
	}
	s.tat = base.Add(time.Duration(n) * sc.Interval)
	s.seq++
	s.places = append(s.places, base)
	s.spans = append(s.spans, time.Duration(n)*sc.Interval)
	mark := s.seq
	s.books++
	s.slots += n
	s.mu.Unlock()
	if err := s.travel(ctx, true); err != nil {
		return 0, 0, 0, err // booked, but the answer was lost: the slots are wasted
	}
	return base.Sub(now), mark, now.UnixNano(), nil
}

func (s *memStore) Now(ctx context.Context) (int64, error) {
	if err := s.travel(ctx, false); err != nil {
		return 0, err
	}
	s.mu.Lock()
	now := time.Now().UnixNano()
	s.reads++
	s.mu.Unlock()
	if err := s.travel(ctx, true); err != nil {
		return 0, err
	}
	return now, nil
}

// bookings returns each booking's span (see spans), and how many times Now
// read the clock.
func (s *memStore) bookings() (spans []time.Duration, reads int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans), s.reads
}

func (s *memStore) Refund(ctx context.Context, sc fleet.Schedule, mark int64, n int) (bool, error) {
	if err := s.travel(ctx, false); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark != s.seq {
		return false, nil
	}
	s.tat = s.tat.Add(-time.Duration(n) * sc.Interval)
	s.refunds++
	return true, nil
}

func (s *memStore) stats() (books, slots, refunds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.books, s.slots, s.refunds
}

// booked returns each booking's base, in the order they were made.
func (s *memStore) booked() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.places)
}

// asked returns when each Book was called.
func (s *memStore) asked() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asks)
}
