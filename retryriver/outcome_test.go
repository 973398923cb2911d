package retryriver_test

import (
	"context"
	"errors"
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

// The attempts a job's metadata marks outcome-unknown, as numbers.
func unknownAttempts(t *testing.T, job *rivertype.JobRow) []int {
	t.Helper()
	raw, ok := metadata(t, job.Metadata)[retryriver.MetadataOutcomeUnknown]
	if !ok {
		return nil
	}
	var out []int
	for _, v := range raw.([]any) {
		out = append(out, int(v.(float64)))
	}
	return out
}

// workers returns a River Workers bundle whose one worker calls fn.
func workers(fn func(context.Context, *river.Job[failArgs]) error) *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, &funcWorker{log: &attemptLog{}, fn: fn})
	return w
}

// A worker that panics may have done work: its attempt is marked at once,
// so the mark stays when the next attempt cancels the job itself. Before
// the fix the panicking attempt was marked only when the next attempt's
// error was decided, which a river.JobCancel skips.
func TestPanicThenJobCancelKeepsTheMark(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			m := retryriver.New(retry.Policy{Backoff: retry.Constant(time.Millisecond)})
			job, _ := runJob(t, b, m, func(_ context.Context, job *river.Job[failArgs]) error {
				if job.Attempt == 1 {
					panic("worker bug after the request was sent")
				}
				return river.JobCancel(errors.New("order withdrawn"))
			})
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			assert.Equal(t, []int{1}, unknownAttempts(t, job))
			assert.Equal(t, []int64{job.ID}, b.query(t, b.reconcile), "the reconciliation query")
		})
	}
}

// An attempt River cuts off by cancelling the job remotely may have done
// work: it is marked, and the cancelled job is found by the reconciliation
// query. Before the fix such an attempt went back to River unmarked.
func TestRemoteCancelMarksTheAttempt(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			running := make(chan struct{})
			m := retryriver.New(retry.Policy{})
			c := b.client(t, fast(m.Config(&river.Config{
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
				Workers: workers(func(ctx context.Context, _ *river.Job[failArgs]) error {
					close(running) // the request is on its way
					<-ctx.Done()
					return ctx.Err()
				}),
			})))
			start(t, c)
			res, err := c.Insert(t.Context(), failArgs{}, nil)
			require.NoError(t, err)
			<-running
			_, err = c.JobCancel(t.Context(), res.Job.ID)
			require.NoError(t, err)
			job := waitFinal(t, c, res.Job.ID)
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			assert.Equal(t, []int{1}, unknownAttempts(t, job))
			assert.Equal(t, []int64{job.ID}, b.query(t, b.reconcile), "the reconciliation query")
		})
	}
}

// An attempt cut off by a client that stops and cancels its jobs may have
// done work: it is marked before River makes the job available again with
// the same attempt number, and the mark stays when the next client
// completes it. Before the fix nothing marked it.
func TestSoftStopMarksTheAttempt(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			m := retryriver.New(retry.Policy{})
			running := make(chan struct{})
			first := b.client(t, fast(m.Config(&river.Config{
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
				Workers: workers(func(ctx context.Context, _ *river.Job[failArgs]) error {
					close(running)
					<-ctx.Done()
					return ctx.Err()
				}),
			})))
			require.NoError(t, first.Start(t.Context()))
			res, err := first.Insert(t.Context(), failArgs{}, nil)
			require.NoError(t, err)
			<-running
			require.NoError(t, first.StopAndCancel(t.Context()))
			job, err := first.JobGet(t.Context(), res.Job.ID)
			require.NoError(t, err)
			assert.Equal(t, rivertype.JobStateAvailable, job.State, "River makes an interrupted job available again")
			assert.Equal(t, 0, job.Attempt, "and gives its attempt number back")
			assert.Equal(t, []int{1}, unknownAttempts(t, job))

			second := b.client(t, fast(m.Config(&river.Config{
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
				Workers: workers(func(context.Context, *river.Job[failArgs]) error { return nil }),
			})))
			start(t, second)
			job = waitFinal(t, second, res.Job.ID)
			assert.Equal(t, rivertype.JobStateCompleted, job.State)
			assert.Equal(t, 1, job.Attempt)
			assert.Equal(t, []int{1}, unknownAttempts(t, job), "the run that was cut off may have done the work too")
		})
	}
}

// rescued has River's rescuer take a job back from a worker that hangs: a
// client that is never the leader works the job's first attempt, whose
// worker ignores its context; once that has run longer than
// RescueStuckJobsAfter, a second client starts with fn as its worker,
// becomes the leader, and its rescuer (which runs when a client becomes the
// leader) returns the job, state retryable with the rescuer's error for
// attempt 1. It returns the second client and the job's ID.
func rescued(t *testing.T, b backend, policy retry.Policy, fn func(context.Context, *river.Job[failArgs]) error) (queue, int64) {
	t.Helper()
	release := make(chan struct{})
	running := make(chan struct{})
	hung := b.client(t, fast(retryriver.New(policy).Config(&river.Config{
		Queues:                 map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		LeaderElectionDisabled: true,
		Workers: workers(func(context.Context, *river.Job[failArgs]) error {
			close(running)
			<-release // hangs, deaf to its context, until the test ends
			return nil
		}),
	})))
	start(t, hung)
	t.Cleanup(func() { close(release) }) // runs before hung is stopped
	res, err := hung.Insert(t.Context(), failArgs{}, nil)
	require.NoError(t, err)
	<-running

	const rescueAfter = 200 * time.Millisecond
	waitFor(t, hung, res.Job.ID, "running past RescueStuckJobsAfter", func(job *rivertype.JobRow) bool {
		return job.State == rivertype.JobStateRunning && job.AttemptedAt != nil && time.Since(*job.AttemptedAt) > 2*rescueAfter
	})
	policy.AttemptTimeout = rescueAfter / 2
	leader := b.client(t, fast(retryriver.New(policy).Config(&river.Config{
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:              workers(fn),
		JobTimeout:           rescueAfter / 2, // the rescuer waits for this too
		RescueStuckJobsAfter: rescueAfter,
	})))
	start(t, leader)
	return leader, res.Job.ID
}

const rescuerError = "Stuck job rescued by JobRescuer"

// An attempt River's rescuer took back from its worker may have done work:
// the next attempt marks it before it runs, so the mark stays when that
// attempt cancels the job. Before the fix the mark was written only with
// the next attempt's decided error, which a river.JobCancel skips.
func TestRescuedAttemptIsMarked(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c, id := rescued(t, b, retry.Policy{Backoff: retry.Constant(time.Millisecond)}, func(context.Context, *river.Job[failArgs]) error {
				return river.JobCancel(errors.New("order withdrawn"))
			})
			job := waitFinal(t, c, id)
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.NotEmpty(t, job.Errors)
			assert.Equal(t, rescuerError, job.Errors[0].Error, "attempt 1 was River's rescue")
			assert.Equal(t, 2, job.Attempt)
			assert.Equal(t, []int{1}, unknownAttempts(t, job))
			assert.Equal(t, []int64{id}, b.query(t, b.reconcile), "the reconciliation query")
		})
	}
}

// A job cancelled remotely after River's rescuer took it back, before any
// other attempt ran, carries no mark of the middleware's (nothing of it ran
// after the rescue), and the reconciliation query finds it by the rescuer's
// error.
func TestRescuedJobCancelledBeforeItsNextAttemptIsReconciled(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c, id := rescued(t, b, retry.Policy{Backoff: retry.Constant(time.Hour)}, func(context.Context, *river.Job[failArgs]) error {
				t.Error("the job ran again")
				return nil
			})
			waitFor(t, c, id, "rescued", func(job *rivertype.JobRow) bool { return job.State == rivertype.JobStateRetryable })
			_, err := c.JobCancel(t.Context(), id)
			require.NoError(t, err)
			job := waitFinal(t, c, id)
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.Len(t, job.Errors, 1)
			assert.Equal(t, rescuerError, job.Errors[0].Error)
			assert.Equal(t, []int64{id}, b.query(t, b.reconcile), "the reconciliation query")
		})
	}
}

type otherArgs struct{}

func (otherArgs) Kind() string { return "retryriver_test_other" }

type otherWorker struct {
	river.WorkerDefaults[otherArgs]
}

func (otherWorker) Work(context.Context, *river.Job[otherArgs]) error { return nil }

// An attempt River failed before any worker ran (a client that does not
// know the job's kind fetched it: a rolling deploy) never ran: it is not
// marked, while a later attempt that timed out is. Before the fix the
// attempt that never ran was marked too, and the reconciliation query
// listed jobs whose work never started.
func TestAttemptThatNeverRanIsNotMarked(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(500 * time.Millisecond), AttemptTimeout: 50 * time.Millisecond}
			inserter := b.client(t, &river.Config{Logger: quietLogger()})
			timeout, never := failArgs{Name: "times out at attempt 2"}, failArgs{Name: "stopped at attempt 2"}
			var ids []int64
			for _, args := range []failArgs{timeout, never} {
				res, err := inserter.Insert(t.Context(), args, nil)
				require.NoError(t, err)
				ids = append(ids, res.Job.ID)
			}

			old := river.NewWorkers()
			river.AddWorker(old, otherWorker{})
			oldClient := b.client(t, fast(retryriver.New(policy).Config(&river.Config{
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
				Workers: old,
			})))
			require.NoError(t, oldClient.Start(t.Context()))
			for _, id := range ids {
				waitFor(t, oldClient, id, "failed once", func(job *rivertype.JobRow) bool { return len(job.Errors) > 0 })
			}
			require.NoError(t, oldClient.StopAndCancel(t.Context()))

			// The old client may have failed a job more than once before it
			// stopped: the new one times out on the first attempt it runs.
			var timedOutAttempt atomic.Int32
			newClient := b.client(t, fast(retryriver.New(policy).Config(&river.Config{
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
				Workers: workers(func(ctx context.Context, job *river.Job[failArgs]) error {
					if job.Args == timeout && timedOutAttempt.CompareAndSwap(0, int32(job.Attempt)) {
						<-ctx.Done()
						return ctx.Err()
					}
					return retry.Permanent(errFlaky)
				}),
			})))
			start(t, newClient)
			timedOut, stopped := waitFinal(t, newClient, ids[0]), waitFinal(t, newClient, ids[1])
			for _, job := range []*rivertype.JobRow{timedOut, stopped} {
				assert.Equal(t, rivertype.JobStateCancelled, job.State)
				assert.Contains(t, job.Errors[0].Error, "not registered", "attempt 1 met a client that does not know the kind")
			}
			require.GreaterOrEqual(t, timedOutAttempt.Load(), int32(2))
			assert.Equal(t, []int{int(timedOutAttempt.Load())}, unknownAttempts(t, timedOut), "attempts marked")
			assert.Nil(t, unknownAttempts(t, stopped), "attempts marked")
			assert.Equal(t, []int64{timedOut.ID}, b.query(t, b.reconcile), "the reconciliation query")
		})
	}
}
