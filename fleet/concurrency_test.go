package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
)

// memSlots is a real SlotStore held in memory, on the test's clock (virtual,
// inside a synctest bubble): leases and their expiries. latency is spent on
// the way out and back; down makes every call fail, hang makes it never
// answer (until its context ends).
type memSlots struct {
	mu       sync.Mutex
	leases   map[string]time.Time
	latency  time.Duration
	down     error
	hang     bool
	asks     int // Lease calls
	asking   int // Lease calls under way
	most     int // the most Lease calls under way at once
	releases int
	renewals int
}

func (s *memSlots) set(f func(s *memSlots)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *memSlots) travel(ctx context.Context) error {
	s.mu.Lock()
	down, hang, latency := s.down, s.hang, s.latency
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return down
}

func (s *memSlots) Lease(ctx context.Context, id string, limit int, lease time.Duration) (bool, error) {
	s.mu.Lock()
	s.asks++
	s.asking++
	s.most = max(s.most, s.asking)
	s.mu.Unlock()
	defer s.set(func(s *memSlots) { s.asking-- })
	if err := s.travel(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	now := time.Now()
	if s.leases == nil {
		s.leases = map[string]time.Time{}
	}
	for k, exp := range s.leases {
		if !exp.After(now) {
			delete(s.leases, k)
		}
	}
	ok := len(s.leases) < limit
	if ok {
		s.leases[id] = now.Add(lease)
	}
	s.mu.Unlock()
	return ok, s.travel(ctx)
}

func (s *memSlots) Renew(ctx context.Context, ids []string, lease time.Duration) ([]string, error) {
	if err := s.travel(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.renewals++
	var lost []string
	for _, id := range ids {
		if _, ok := s.leases[id]; ok {
			s.leases[id] = time.Now().Add(lease)
		} else {
			lost = append(lost, id)
		}
	}
	s.mu.Unlock()
	return lost, s.travel(ctx)
}

func (s *memSlots) Release(ctx context.Context, id string) error {
	if err := s.travel(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.releases++
	delete(s.leases, id)
	s.mu.Unlock()
	return nil
}

// stats returns the store's counts.
func (s *memSlots) stats() (asks, most, releases, renewals int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asks, s.most, s.releases, s.renewals
}

// live returns the leases not yet expired.
func (s *memSlots) live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, exp := range s.leases {
		if exp.After(time.Now()) {
			n++
		}
	}
	return n
}

// newConcurrency returns fleet.NewConcurrency's Concurrency, or ends the
// test.
func newConcurrency(t testing.TB, s fleet.SlotStore, limit int, lease time.Duration, opts *fleet.Options) *fleet.Concurrency {
	t.Helper()
	c, err := fleet.NewConcurrency(s, limit, lease, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Three processes of 10 goroutines each, every one wanting a slot all the
// time, share a limit of 4: never more than 4 in flight at once, and all 4
// used.
func TestConcurrencySharesOneLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{latency: 200 * time.Microsecond}
		var inFlight, most, attempts atomic.Int64
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		for range 3 {
			c := newConcurrency(t, store, 4, time.Second, nil)
			for range 10 {
				wg.Go(func() {
					for {
						release, err := c.Acquire(ctx, time.Time{})
						if err != nil {
							assert.ErrorIs(t, err, context.DeadlineExceeded)
							return
						}
						n := inFlight.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						attempts.Add(1)
						time.Sleep(10 * time.Millisecond)
						inFlight.Add(-1)
						release(10*time.Millisecond, nil)
					}
				})
			}
		}
		wg.Wait()
		time.Sleep(time.Second) // the last releases
		assert.Equal(t, int64(4), most.Load(), "the most in flight at once")
		// 4 slots of 10ms for 2s: 800, less the round trips between.
		assert.Greater(t, attempts.Load(), int64(600), "the slots are used")
		assert.Zero(t, store.live(), "every lease released")
	})
}

// An attempt that finds every slot taken waits for one, and stops with
// retry.ErrNoSlot when its time to start passes, at that time; with the
// context's cause when the context ends first.
func TestConcurrencyWaitEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{}
		other := newConcurrency(t, store, 1, time.Second, nil)
		release, err := other.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)

		c := newConcurrency(t, store, 1, time.Second, nil)
		start := time.Now()
		_, err = c.Acquire(t.Context(), start.Add(300*time.Millisecond))
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
		asks, _, _, _ := store.stats()

		why := errors.New("the caller left")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(200*time.Millisecond, func() { cancel(why) })
		start = time.Now()
		_, err = c.Acquire(ctx, time.Time{})
		assert.Equal(t, why, err)
		assert.Equal(t, 200*time.Millisecond, time.Since(start))

		_, err = c.Acquire(t.Context(), time.Now())
		assert.ErrorIs(t, err, retry.ErrNoSlot, "a time to start that has passed")
		assert.Less(t, asks, 2+300/5, "asked again after pauses of 5ms at least")

		// Released by the other process: taken within the longest pause.
		time.AfterFunc(100*time.Millisecond, func() { release(0, nil) })
		start = time.Now()
		mine, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		assert.LessOrEqual(t, time.Since(start), 150*time.Millisecond)
		mine(0, nil)
		synctest.Wait()
	})
}

// A slot released in the same process goes to one of its waiters at once,
// without waiting for the next pause; and a process with many waiters asks
// the store one at a time, never for more than the limit.
func TestConcurrencyWaitersOfOneProcess(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{latency: time.Millisecond}
		other := newConcurrency(t, store, 3, time.Second, nil)
		held, err := other.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		c := newConcurrency(t, store, 3, time.Second, nil)
		r1, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		r2, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var got atomic.Int64
		var when sync.Map
		start := time.Now()
		for i := range 10 {
			wg.Go(func() {
				release, err := c.Acquire(t.Context(), start.Add(time.Second))
				if err == nil {
					got.Add(1)
					when.Store(i, time.Since(start))
					time.Sleep(2 * time.Second)
					release(0, nil)
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		store.set(func(s *memSlots) { s.most = 0 })
		r1(0, nil)
		time.Sleep(400 * time.Millisecond)
		assert.Equal(t, int64(1), got.Load(), "one waiter took the slot released")
		when.Range(func(_, v any) bool {
			// Released at 500ms: the release takes 1ms, then the waiter's
			// lease 2ms; or a lease already on its way when the slot came
			// free finds none, and the next goes at once on its answer.
			assert.LessOrEqual(t, v, 504*time.Millisecond, "at once")
			return true
		})
		_, most, _, _ := store.stats()
		assert.Equal(t, 1, most, "one Lease under way at once")
		wg.Wait()
		r2(0, nil)
		held(0, nil)
		time.Sleep(time.Second) // the releases' round trips
	})
}

// A long attempt keeps its lease, renewed every third of it; a process
// that dies (here: leases taken by hand, never renewed nor released) holds
// its slots for a lease at most.
func TestConcurrencyLeases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{}
		c := newConcurrency(t, store, 2, 300*time.Millisecond, nil)
		long, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		// The dead process's lease, taken with the first.
		ok, err := store.Lease(t.Context(), "dead", 2, 300*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)

		start := time.Now()
		next, err := c.Acquire(t.Context(), start.Add(2*time.Second))
		require.NoError(t, err)
		waited := time.Since(start)
		assert.Greater(t, waited, 300*time.Millisecond-time.Millisecond, "not before the dead lease ran out")
		assert.LessOrEqual(t, waited, 300*time.Millisecond+50*time.Millisecond, "within the lease and a pause")
		time.Sleep(time.Second)
		assert.Equal(t, 2, store.live(), "the long attempt's lease lives on, renewed")
		_, _, _, renewals := store.stats()
		assert.GreaterOrEqual(t, renewals, 4, "renewed every 100ms")
		long(0, nil)
		next(0, nil)
		synctest.Wait()
		assert.Zero(t, store.live())
		_, _, _, after := store.stats()
		time.Sleep(time.Second)
		_, _, _, later := store.stats()
		assert.Equal(t, after, later, "no renewals with no lease held")
	})
}

// A release given twice frees one slot.
func TestConcurrencyReleaseOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{}
		c := newConcurrency(t, store, 1, time.Second, nil)
		release, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		release(0, nil)
		release(0, nil)
		synctest.Wait()
		again, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		_, err = c.Acquire(t.Context(), time.Now().Add(100*time.Millisecond))
		assert.ErrorIs(t, err, retry.ErrNoSlot, "the one slot is taken")
		again(0, nil)
		synctest.Wait()
		_, _, releases, _ := store.stats()
		assert.Equal(t, 2, releases)
	})
}

// A store that is down fails an Acquire at once, with ErrUnavailable and
// the store's error; it is left alone for a pause, then asked again.
func TestConcurrencyFailsClosedWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{down: errStoreDown}
		var seen atomic.Int64
		c := newConcurrency(t, store, 2, time.Second, &fleet.Options{OnStoreError: func(error) { seen.Add(1) }})
		start := time.Now()
		_, err := c.Acquire(t.Context(), time.Time{})
		assert.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.ErrorIs(t, err, errStoreDown)
		assert.ErrorContains(t, err, "fleet: limiter store unavailable: connection refused")
		assert.Zero(t, time.Since(start))
		store.set(func(s *memSlots) { s.down = nil })
		_, err = c.Acquire(t.Context(), time.Time{})
		assert.ErrorIs(t, err, fleet.ErrUnavailable, "left alone for a pause")
		asks, _, _, _ := store.stats()
		assert.Equal(t, 1, asks)
		time.Sleep(10 * time.Millisecond)
		release, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err, "asked again after the pause")
		release(0, nil)
		synctest.Wait()
		assert.Equal(t, int64(1), seen.Load(), "OnStoreError heard of the failure")
	})
}

// A store that does not answer fails an Acquire at the Timeout; a lease it
// takes late is released.
func TestConcurrencyTimesOutASlowStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{latency: 300 * time.Millisecond}
		c := newConcurrency(t, store, 2, time.Second, nil)
		start := time.Now()
		_, err := c.Acquire(t.Context(), time.Time{})
		assert.ErrorIs(t, err, fleet.ErrUnavailable)
		assert.ErrorContains(t, err, "no answer within 100ms")
		assert.Equal(t, 100*time.Millisecond, time.Since(start))
		time.Sleep(2 * time.Second)
		assert.Zero(t, store.live(), "the late lease was released")
		_, _, releases, _ := store.stats()
		assert.Equal(t, 1, releases)
	})
}

// With Fallback, an Acquire goes on while the store is down, on a local
// limit of that share of the limit, which counts the attempts still
// running on leases taken before.
func TestConcurrencyFallsBackToAShareOfTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{}
		c := newConcurrency(t, store, 10, time.Second, &fleet.Options{Fallback: 0.3}) // 3 local slots
		before, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		store.set(func(s *memSlots) { s.down = errStoreDown })
		var releases []func(time.Duration, error)
		for i := range 2 {
			r, err := c.Acquire(t.Context(), time.Time{})
			require.NoError(t, err, "fallback slot %d", i)
			releases = append(releases, r)
		}
		start := time.Now()
		_, err = c.Acquire(t.Context(), start.Add(time.Second))
		assert.ErrorIs(t, err, retry.ErrNoSlot, "3 in flight: the lease from before and 2 of the fallback")
		assert.Equal(t, time.Second, time.Since(start))

		time.AfterFunc(100*time.Millisecond, func() { releases[0](0, nil) })
		start = time.Now()
		r, err := c.Acquire(t.Context(), start.Add(time.Second))
		require.NoError(t, err, "a fallback slot came free")
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "at once")
		r(0, nil)
		releases[1](0, nil)
		before(0, nil)

		store.set(func(s *memSlots) { s.down = nil })
		time.Sleep(200 * time.Millisecond)
		asks, _, _, _ := store.stats()
		r, err = c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		later, _, _, _ := store.stats()
		assert.Equal(t, asks+1, later, "the store is asked again once it answers")
		r(0, nil)
		synctest.Wait()
	})
}

// NewConcurrency refuses what would make every call fail, with an error
// that names the field; the zero Concurrency says it was not made.
func TestNewConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	store := &memSlots{}
	tests := []struct {
		name  string
		store fleet.SlotStore
		limit int
		lease time.Duration
		opts  *fleet.Options
		want  string
	}{
		{"nil store", nil, 1, time.Second, nil, "fleet: store is nil"},
		{"zero limit", store, 0, time.Second, nil, "fleet: limit 0 admits no attempt"},
		{"negative limit", store, -1, time.Second, nil, "fleet: limit -1 admits no attempt"},
		{"zero lease", store, 1, 0, nil, "fleet: lease 0s is too short"},
		{"negative lease", store, 1, -time.Second, nil, "fleet: lease -1s is too short"},
		{"short lease", store, 1, time.Microsecond, nil, "fleet: lease 1µs is too short: it must be at least 1ms"},
		{"negative timeout", store, 1, time.Second, &fleet.Options{Timeout: -1}, "fleet: Options.Timeout -1ns is negative"},
		{"fallback above 1", store, 1, time.Second, &fleet.Options{Fallback: 2}, "fleet: Options.Fallback 2 is not a share"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := fleet.NewConcurrency(tt.store, tt.limit, tt.lease, tt.opts)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, c)
		})
	}
	var zero fleet.Concurrency
	_, err := zero.Acquire(t.Context(), time.Time{})
	assert.ErrorContains(t, err, "fleet: Concurrency not made by NewConcurrency")
}

// A Concurrency is a retry.Concurrency.
var _ retry.Concurrency = (*fleet.Concurrency)(nil)

// Two processes share a limit of one slot through one store (here memSlots,
// a SlotStore in memory; retrypg and retryredis provide the real ones):
// while process A holds it, process B finds none before its time to start.
func ExampleConcurrency() {
	store := &memSlots{}
	a, err := fleet.NewConcurrency(store, 1, 10*time.Second, nil) // in process A
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := fleet.NewConcurrency(store, 1, 10*time.Second, nil) // in process B
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	release, err := a.Acquire(ctx, time.Time{})
	fmt.Println("A:", err)
	_, err = b.Acquire(ctx, time.Now().Add(20*time.Millisecond))
	fmt.Println("B:", err)
	release(0, nil) // the loop calls it when the attempt ends
	// Output:
	// A: <nil>
	// B: retry: no concurrency slot
}

// Through the loop: calls of three processes that retry and hedge share a
// fleet limit of 3 slots, never hold more attempts in flight at once, and
// leave no lease behind.
func TestConcurrencyThroughDo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{latency: 300 * time.Microsecond}
		var inFlight, most, attempts atomic.Int64
		var wg sync.WaitGroup
		for range 3 {
			p := retry.Policy{
				Concurrency: newConcurrency(t, store, 3, time.Second, nil),
				Backoff:     retry.Constant(2 * time.Millisecond),
				HedgeDelay:  retry.Constant(4 * time.Millisecond),
			}
			for i := range 8 {
				wg.Go(func() {
					var n atomic.Int64
					_ = retry.Do(t.Context(), func(ctx context.Context) error {
						k := inFlight.Add(1)
						defer inFlight.Add(-1)
						for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
						}
						attempts.Add(1)
						select {
						case <-time.After(time.Duration(1+i) * time.Millisecond):
						case <-ctx.Done():
							return ctx.Err()
						}
						if n.Add(1) == 1 {
							return syscall.ECONNRESET
						}
						return nil
					}, p)
				})
			}
		}
		wg.Wait()
		time.Sleep(time.Second) // the releases, made in the background
		assert.LessOrEqual(t, most.Load(), int64(3), "attempts in flight at once across the fleet")
		assert.GreaterOrEqual(t, attempts.Load(), int64(48), "every call failed once and then succeeded")
		assert.Zero(t, store.live(), "every lease released")
	})
}

// A by that has already come (a hedge's) asks the store once: a slot free
// then is taken, and none free means retry.ErrNoSlot at once, without a
// wait.
func TestConcurrencyTryNow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &memSlots{latency: time.Millisecond}
		c := newConcurrency(t, store, 1, time.Second, nil)
		start := time.Now()
		release, err := c.Acquire(t.Context(), time.Now())
		require.NoError(t, err, "a free slot")
		assert.Equal(t, 2*time.Millisecond, time.Since(start), "one round trip")

		other := newConcurrency(t, store, 1, time.Second, nil)
		start = time.Now()
		_, err = other.Acquire(t.Context(), time.Now())
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		assert.Equal(t, 2*time.Millisecond, time.Since(start), "one round trip, no wait")
		release(0, nil)
		time.Sleep(10 * time.Millisecond) // the release, made in the background
		r2, err := other.Acquire(t.Context(), time.Now())
		require.NoError(t, err, "asked again, though the last answer was full")
		r2(0, nil)
		time.Sleep(10 * time.Millisecond)
		assert.Zero(t, store.live())
	})
}
