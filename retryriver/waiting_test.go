package retryriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

// laterArgs is a job of a second kind, in a second queue.
type laterArgs struct{}

func (laterArgs) Kind() string { return "retryriver_test_later" }

type laterWorker struct {
	river.WorkerDefaults[laterArgs]
}

func (laterWorker) Work(context.Context, *river.Job[laterArgs]) error { return nil }

// OldestWaiting finds, per queue and kind, the first inserted of the jobs
// that wait for a retry or a slot, and none of those that never ran.
func TestOldestWaiting(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			// Client a fails every job of the default queue, with its retry
			// an hour away.
			workers := river.NewWorkers()
			river.AddWorker(workers, &funcWorker{log: &attemptLog{}, fn: func(context.Context, *river.Job[failArgs]) error { return errFlaky }})
			a := b.client(t, fast(retryriver.New(retry.Policy{Backoff: retry.Constant(time.Hour)}).Config(&river.Config{
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
				Workers: workers,
			})))
			none, err := retryriver.OldestWaiting(ctx, a)
			require.NoError(t, err)
			assert.Empty(t, none, "no job at all")

			later, err := a.Insert(ctx, failArgs{Name: "later"}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			first, err := a.Insert(ctx, failArgs{Name: "first"}, nil)
			require.NoError(t, err)
			second, err := a.Insert(ctx, failArgs{Name: "second"}, nil)
			require.NoError(t, err)
			start(t, a)
			for _, id := range []int64{first.Job.ID, second.Job.ID} {
				waitFor(t, a, id, "retryable", func(j *rivertype.JobRow) bool { return j.State == rivertype.JobStateRetryable })
			}

			// Client o finds no slot for the jobs of queue "other"; it is
			// stopped once its job is held, so that the job is not running
			// when it is counted.
			workers = river.NewWorkers()
			river.AddWorker(workers, laterWorker{})
			o := b.client(t, fast(retryriver.New(retry.Policy{Concurrency: &retry.ConcurrencyLimit{}}).Config(&river.Config{
				Queues:  map[string]river.QueueConfig{"other": {MaxWorkers: 4}},
				Workers: workers,
			})))
			held, err := o.Insert(ctx, laterArgs{}, &river.InsertOpts{Queue: "other"})
			require.NoError(t, err)
			require.NoError(t, o.Start(ctx))
			waitFor(t, o, held.Job.ID, "held for a slot", func(j *rivertype.JobRow) bool {
				return j.State != rivertype.JobStateRunning && j.Attempt == 0 && len(j.Metadata) > 0 &&
					metadata(t, j.Metadata)[retryriver.MetadataHeld] == "slot"
			})
			require.NoError(t, o.Stop(ctx))

			got, err := retryriver.OldestWaiting(ctx, a)
			require.NoError(t, err)
			for i := range got {
				got[i].CreatedAt = got[i].CreatedAt.UTC()
			}
			assert.Equal(t, []retryriver.Waiting{
				{Queue: river.QueueDefault, Kind: "retryriver_test", JobID: first.Job.ID, CreatedAt: first.Job.CreatedAt.UTC(), For: "retry"},
				{Queue: "other", Kind: "retryriver_test_later", JobID: held.Job.ID, CreatedAt: held.Job.CreatedAt.UTC(), For: "slot"},
			}, got)
			assert.Less(t, later.Job.ID, first.Job.ID, "the job scheduled for later is older, and not delayed work")
		})
	}
}
