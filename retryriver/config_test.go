package retryriver_test

import (
	"context"
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

// A common split: one client only inserts (a web process), another works
// the jobs. River stamps max_attempts when a job is inserted, from the
// inserting client's config, so the inserting client needs the same line:
// without it the job gets River's default of 25 attempts, and the
// middleware, which honours each job's max_attempts, makes 25.
func TestInsertingClientAndWorkingClient(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			policy := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Millisecond)}
			inserter := b.client(t, retryriver.New(policy).Config(&river.Config{Logger: quietLogger()}))
			plain := b.client(t, &river.Config{Logger: quietLogger()})

			var runs atomic.Int32
			worker := b.client(t, fast(retryriver.New(policy).Config(&river.Config{
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
				Workers: workers(func(context.Context, *river.Job[failArgs]) error {
					runs.Add(1)
					return errFlaky
				}),
			})))
			res, err := inserter.Insert(t.Context(), failArgs{}, nil)
			require.NoError(t, err)
			assert.Equal(t, 3, res.Job.MaxAttempts, "max_attempts stamped by the inserting client")
			other, err := plain.Insert(t.Context(), otherArgs{}, nil)
			require.NoError(t, err)
			assert.Equal(t, 25, other.Job.MaxAttempts, "a client without the line stamps River's default")

			start(t, worker)
			job := waitFinal(t, worker, res.Job.ID)
			assert.Equal(t, rivertype.JobStateDiscarded, job.State)
			assert.Equal(t, int32(3), runs.Load(), "attempts")
			assert.Equal(t, "retry: gave up after 3 attempts (attempts exhausted): flaky provider", job.Errors[2].Error)
		})
	}
}

// River's JobTimeout (1 minute unless set) bounds each attempt's context
// inside the middleware's: Config sets it to Policy.AttemptTimeout, so a
// longer AttemptTimeout is not cut to a minute. Before the fix the worker's
// context ended 60 s after the attempt started.
func TestAttemptTimeoutLongerThanRiversDefault(t *testing.T) {
	t.Parallel()
	b := sqliteBackend(t)
	const timeout = 90 * time.Second
	var left time.Duration
	_, _ = runJob(t, b, retryriver.New(retry.Policy{AttemptTimeout: timeout}), func(ctx context.Context, _ *river.Job[failArgs]) error {
		deadline, ok := ctx.Deadline()
		require.True(t, ok)
		left = time.Until(deadline)
		return nil
	})
	assert.Greater(t, left, timeout-10*time.Second, "time left to the attempt (River's own default is a minute)")
	assert.LessOrEqual(t, left, timeout)
}

// Config sets River's JobTimeout from Policy.AttemptTimeout, and leaves it
// alone when the policy has none.
func TestConfigJobTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		attempt, config time.Duration
		want            time.Duration
	}{
		{"policy's timeout", 2 * time.Minute, 0, 2 * time.Minute},
		{"policy's timeout wins over the config's", 2 * time.Minute, 30 * time.Second, 2 * time.Minute},
		{"no policy timeout: River's default", 0, 0, 0},
		{"no policy timeout: the config's", 0, 30 * time.Second, 30 * time.Second},
		{"no policy timeout: none", 0, -1, -1},
	}
	for _, tt := range tests {
		got := retryriver.New(retry.Policy{AttemptTimeout: tt.attempt}).Config(&river.Config{JobTimeout: tt.config}).JobTimeout
		assert.Equal(t, tt.want, got, "%s: JobTimeout", tt.name)
	}
}
