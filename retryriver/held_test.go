package retryriver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/retryriver"
)

// switchSlots is a fleet.SlotStore that is down (every call fails as a
// store that refuses connections does) until up is called, and then keeps
// its leases in a map.
type switchSlots struct {
	mu     sync.Mutex
	down   bool
	asked  int                  // Lease calls while down
	leases map[string]time.Time // id to expiry
}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (s *switchSlots) Lease(_ context.Context, id string, limit int, lease time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.asked++
		return false, errRefused
	}
	now := time.Now()
	for k, exp := range s.leases {
		if !now.Before(exp) {
			delete(s.leases, k)
		}
	}
	if len(s.leases) >= limit {
		return false, nil
	}
	if s.leases == nil {
		s.leases = map[string]time.Time{}
	}
	s.leases[id] = now.Add(lease)
	return true, nil
}

func (s *switchSlots) Renew(_ context.Context, ids []string, lease time.Duration) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errRefused
	}
	var lost []string
	for _, id := range ids {
		if _, ok := s.leases[id]; ok {
			s.leases[id] = time.Now().Add(lease)
		} else {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

func (s *switchSlots) Release(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errRefused
	}
	delete(s.leases, id)
	return nil
}

func (s *switchSlots) up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = false
}

// state returns the Lease calls made while down and the leases held.
func (s *switchSlots) state() (asked, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked, len(s.leases)
}

// doneEvents returns an Observe that keeps the events that end a job, and
// the function that returns them.
func doneEvents() (func(context.Context, retry.Event), func() []retry.Event) {
	var mu sync.Mutex
	var events []retry.Event
	return func(_ context.Context, e retry.Event) {
			if e.Done {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}, func() []retry.Event {
			mu.Lock()
			defer mu.Unlock()
			return append([]retry.Event(nil), events...)
		}
}

// A shared Concurrency whose store is down, failing closed (the default,
// Fallback 0), makes the job wait a second, snoozed, its attempt not
// counted and marked "store", rather than cancelling it; once the store
// answers, the job takes a lease, runs once, and its mark is cleared.
func TestConcurrencyStoreDownSnoozes(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := &switchSlots{down: true}
			conc, err := fleet.NewConcurrency(store, 1, time.Minute, nil)
			require.NoError(t, err)
			m := retryriver.New(retry.Policy{Concurrency: conc})
			log := &attemptLog{}
			var leased int
			before := time.Now()
			c, id := startJob(t, b, m, log, func(context.Context, *river.Job[failArgs]) error {
				_, leased = store.state()
				return nil
			})
			job := waitFor(t, c, id, "held for the store", func(j *rivertype.JobRow) bool {
				return held(j) == "store" && j.State != rivertype.JobStateRunning
			})
			seen := time.Now()
			// The snooze is the second a fleet limiter leaves a failed store
			// alone, counted from River's clock a moment after the middleware
			// decided; SQLite stores milliseconds.
			const snooze = time.Second
			assert.False(t, job.ScheduledAt.Before(before.Add(snooze).Truncate(time.Millisecond)), "scheduled_at %v, before %v", job.ScheduledAt, before.Add(snooze))
			assert.False(t, job.ScheduledAt.After(seen.Add(snooze)), "scheduled_at %v, after %v", job.ScheduledAt, seen.Add(snooze))
			assert.Zero(t, job.Attempt, "the snooze gave the attempt number back")
			assert.Empty(t, job.Errors)
			assert.Empty(t, log.all(), "no attempt started while the store was down")
			asked, _ := store.state()
			assert.Positive(t, asked, "the store was asked for a lease")

			store.up()
			job = waitFinal(t, c, id)
			assert.Equal(t, rivertype.JobStateCompleted, job.State)
			assert.Empty(t, job.Errors)
			runs := log.all()
			require.Len(t, runs, 1, "the worker ran once, after the store came back")
			assert.Equal(t, 1, runs[0].attempt)
			assert.Equal(t, "store", metadata(t, runs[0].metadata)[retryriver.MetadataHeld], "the run let through was the job held")
			assert.Equal(t, 1, leased, "the attempt ran on a lease in the store")
			assert.Nil(t, held(job), "the hold is cleared once the job is let through")
			// The lease is dropped in the background once the worker returns.
			deadline := time.Now().Add(time.Minute)
			for _, live := store.state(); live != 0; _, live = store.state() {
				require.True(t, time.Now().Before(deadline), "the lease was never given back")
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// A job with a deadline that finds every slot taken waits for one no later
// than its deadline (less MinAttemptTime), then is cancelled with
// retry.ErrNoSlot: the snooze that would follow passes its deadline, so it
// is not snoozed, and its worker never runs.
func TestNoSlotPastDeadlineStops(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			// A queue, so Acquire waits until the deadline; its one slot
			// is another attempt's all along.
			limit := &retry.ConcurrencyLimit{Slots: 1}
			release, err := limit.Acquire(t.Context(), time.Time{})
			require.NoError(t, err)
			defer release(0, nil)
			observe, events := doneEvents()
			// Long enough for River to fetch the job before it on a slow
			// machine: a job fetched after its deadline stops with
			// ErrNoTimeLeft instead.
			const left = 5 * time.Second
			var deadline time.Time
			m := retryriver.New(retry.Policy{Concurrency: limit, Observe: observe},
				retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time {
					deadline = job.CreatedAt.Add(left)
					return deadline
				}))
			job, runs := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error { return nil })
			assert.Empty(t, runs, "the worker ran without a slot")
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.Len(t, job.Errors, 1)
			assert.Contains(t, job.Errors[0].Error, "retry: gave up before the first attempt (no concurrency slot)")
			md := metadata(t, job.Metadata)
			assert.Equal(t, "no concurrency slot", md[retryriver.MetadataStop])
			assert.NotContains(t, md, retryriver.MetadataHeld, "the job was never snoozed")
			require.NotNil(t, job.FinalizedAt)
			assert.False(t, job.FinalizedAt.Before(deadline.Truncate(time.Millisecond)), "finalized at %v, before the deadline %v: it did not wait for a slot", job.FinalizedAt, deadline)

			ev := events()
			require.Len(t, ev, 1, "one end observed")
			var rerr *retry.Error
			require.ErrorAs(t, ev[0].Err, &rerr)
			assert.Equal(t, retry.ErrNoSlot, rerr.Reason)
			assert.Zero(t, rerr.Attempts)
			assert.NoError(t, rerr.Last)
			assert.Equal(t, retry.ErrNoSlot, ev[0].Reason)
			assert.Equal(t, 1, limit.InFlight(), "only the other attempt's slot is taken")
		})
	}
}

// A job whose deadline comes before the breaker may let it through is
// cancelled with the breaker's reason, its Until kept, rather than snoozed
// past it; its worker never runs.
func TestOpenBreakerPastDeadlineStops(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			breaker := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Hour}
			done, _ := breaker.Allow(time.Now())
			done(time.Now(), errFlaky)
			until := breaker.Until(time.Now())
			require.False(t, until.IsZero(), "the breaker is open")
			observe, events := doneEvents()
			m := retryriver.New(retry.Policy{Breaker: breaker, Observe: observe},
				retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time { return job.CreatedAt.Add(time.Minute) }))
			job, runs := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error { return nil })
			assert.Empty(t, runs)
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.Len(t, job.Errors, 1)
			reason := "circuit breaker open until " + until.Format(time.RFC3339Nano)
			assert.Contains(t, job.Errors[0].Error, "retry: gave up before the first attempt ("+reason+")")
			md := metadata(t, job.Metadata)
			assert.Equal(t, reason, md[retryriver.MetadataStop])
			assert.NotContains(t, md, retryriver.MetadataHeld, "the job was never snoozed")

			ev := events()
			require.Len(t, ev, 1, "one end observed")
			var rerr *retry.Error
			require.ErrorAs(t, ev[0].Err, &rerr)
			assert.ErrorIs(t, rerr.Reason, retry.ErrBreakerOpen)
			var open interface{ Until() time.Time }
			require.ErrorAs(t, rerr.Reason, &open)
			assert.True(t, open.Until().Equal(until), "Until %v, the breaker's %v", open.Until(), until)
			assert.Zero(t, rerr.Attempts)
			assert.NoError(t, rerr.Last)
			assert.True(t, strings.HasPrefix(rerr.Error(), "retry: gave up before the first attempt (circuit breaker open until "), rerr.Error())
		})
	}
}
