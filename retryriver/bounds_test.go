package retryriver_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

// startJob starts a client with m on b, inserts one job whose worker calls
// fn, and returns the client and the job's ID.
func startJob(t *testing.T, b backend, m *retryriver.Middleware, log *attemptLog, fn func(context.Context, *river.Job[failArgs]) error) (queue, int64) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, &funcWorker{log: log, fn: fn})
	c := b.client(t, fast(m.Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers: workers,
	})))
	start(t, c)
	res, err := c.Insert(t.Context(), failArgs{Name: t.Name()}, nil)
	require.NoError(t, err)
	return c, res.Job.ID
}

// held returns the job's MetadataHeld, nil when absent or null.
func held(job *rivertype.JobRow) any {
	var md map[string]any
	_ = json.Unmarshal(job.Metadata, &md)
	return md[retryriver.MetadataHeld]
}

// An attempt that fails opens the breaker; the retry that follows finds it
// open and is snoozed until the time the breaker may let an attempt
// through, with its attempt number given back: one attempt counted, one
// error stored.
func TestOpenBreakerSnoozesUntilItMayLetThrough(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			breaker := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Hour}
			m := retryriver.New(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond), Breaker: breaker})
			log := &attemptLog{}
			c, id := startJob(t, b, m, log, func(context.Context, *river.Job[failArgs]) error { return errFlaky })
			job := waitFor(t, c, id, "held by the breaker", func(j *rivertype.JobRow) bool {
				return held(j) == "breaker" && j.State == rivertype.JobStateScheduled
			})
			until := breaker.Until(time.Now())
			require.False(t, until.IsZero(), "the breaker is open")
			// River snoozes for a duration, from its own clock a moment
			// after the middleware's, and SQLite stores milliseconds: the time is
			// until, or a little after, never before.
			assert.False(t, job.ScheduledAt.Before(until.Truncate(time.Millisecond)), "scheduled_at %v, before the breaker's %v", job.ScheduledAt, until)
			assert.Less(t, job.ScheduledAt.Sub(until), time.Minute, "scheduled_at %v, far after the breaker's %v", job.ScheduledAt, until)
			assert.Equal(t, 1, job.Attempt, "the refused retry gave its attempt number back")
			assert.Len(t, job.Errors, 1, "only the attempt that ran stored an error")
			assert.Len(t, log.all(), 1, "the worker ran once")
			assert.Equal(t, "open", breaker.State(time.Now()))
		})
	}
}

// With every slot taken and no queue, a job is snoozed for a short,
// jittered while, its attempt not counted, until a slot frees: then it
// runs, once, and its hold is cleared.
func TestNoSlotSnoozes(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			limit := &retry.ConcurrencyLimit{Slots: 1, Queue: -1}
			release, err := limit.Acquire(t.Context(), time.Time{}) // another process's attempt
			require.NoError(t, err)
			m := retryriver.New(retry.Policy{Concurrency: limit, Rand: func() float64 { return 0.5 }})
			log := &attemptLog{}
			before := time.Now()
			c, id := startJob(t, b, m, log, func(context.Context, *river.Job[failArgs]) error { return nil })
			job := waitFor(t, c, id, "held for a slot", func(j *rivertype.JobRow) bool {
				return held(j) == "slot" && j.State != rivertype.JobStateRunning
			})
			seen := time.Now()
			// The draw 0.5 gives 500ms + 0.5 * 500ms from the snooze.
			const snooze = 750 * time.Millisecond
			assert.False(t, job.ScheduledAt.Before(before.Add(snooze).Truncate(time.Millisecond)), "scheduled_at %v, before %v", job.ScheduledAt, before.Add(snooze))
			assert.False(t, job.ScheduledAt.After(seen.Add(snooze)), "scheduled_at %v, after %v", job.ScheduledAt, seen.Add(snooze))
			assert.Zero(t, job.Attempt, "the snooze gave the attempt number back")
			assert.Empty(t, job.Errors)
			assert.Empty(t, log.all(), "no attempt started")

			release(0, nil)
			job = waitFinal(t, c, id)
			assert.Equal(t, rivertype.JobStateCompleted, job.State)
			runs := log.all()
			require.Len(t, runs, 1)
			assert.Equal(t, 1, runs[0].attempt)
			assert.Nil(t, held(job), "the hold is cleared once the job is let through")
			assert.Zero(t, limit.InFlight(), "the slot is given back")
		})
	}
}

// The slot is held while the worker runs and given back when it returns,
// when it panics, and when it snoozes; a panic and the worker's own snooze
// say nothing of the dependency, so the breaker stays closed.
func TestSlotGivenBackAfterWorkerAndPanic(t *testing.T) {
	t.Parallel()
	limit := &retry.ConcurrencyLimit{Slots: 1}
	breaker := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Hour}
	m := retryriver.New(retry.Policy{MaxAttempts: 1, Concurrency: limit, Breaker: breaker})
	tests := []struct {
		name  string
		fn    func() error
		state rivertype.JobState
	}{
		{"returns", func() error { return nil }, rivertype.JobStateCompleted},
		{"panics", func() error { panic("worker bug") }, rivertype.JobStateDiscarded},
		{"snoozes, then returns", nil, rivertype.JobStateCompleted},
	}
	for _, tt := range tests {
		// A database of its own for each, so that no other client works
		// its job; the limit and the breaker carry over.
		for _, b := range backends(t) {
			var inFlight, runs atomic.Int32
			job, _ := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error {
				inFlight.Store(int32(limit.InFlight()))
				if tt.fn == nil {
					if runs.Add(1) == 1 {
						return river.JobSnooze(time.Millisecond)
					}
					return nil
				}
				return tt.fn()
			})
			assert.Equal(t, tt.state, job.State, "%s on %s", tt.name, b.name)
			assert.Equal(t, int32(1), inFlight.Load(), "%s on %s: slots taken while the worker ran", tt.name, b.name)
			assert.Zero(t, limit.InFlight(), "%s on %s: slots taken once the job ended", tt.name, b.name)
			assert.Equal(t, "closed", breaker.State(time.Now()), "%s on %s", tt.name, b.name)
		}
	}
}
