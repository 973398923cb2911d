package retryriver_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

// The middleware's own cost per attempt, called as River calls it, without
// River: the floor (the worker called directly), a success, and a failure
// that schedules a retry (retry.Next, the hand-over to NextRetry, and
// NextRetry taking it back). Outside a River work context the metadata
// writes fail fast, so the failure's cost here leaves out River's JSON
// merge of the few keys it records.
func BenchmarkMiddleware(b *testing.B) {
	ctx := context.Background()
	policy := retry.Policy{
		MaxAttempts:    5,
		Backoff:        retry.Exponential{Base: 500 * time.Millisecond, Cap: 30 * time.Second},
		AttemptTimeout: 2 * time.Second,
		Limiter:        retry.RateLimiter(rate.NewLimiter(rate.Inf, 1)), // asked for every attempt, never waits
	}
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errFlaky }
	job := &rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: 5, CreatedAt: time.Now(), Metadata: []byte(`{}`)}

	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = ok(ctx)
		}
	})
	b.Run("success", func(b *testing.B) {
		m := retryriver.New(policy)
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Work(ctx, job, ok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retry", func(b *testing.B) {
		m := retryriver.New(policy)
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Work(ctx, job, fail); err != errFlaky {
				b.Fatal(err)
			}
			_ = m.NextRetry(job)
		}
	})
}

// Jobs per second through River, each job a no-op worker that succeeds,
// with retryriver's middleware and with River's default retry policy, on
// the same database (PostgreSQL when RETRY_POSTGRES_URL is set; SQLite
// always). Each iteration queues 1,000 jobs and waits until all have run.
func BenchmarkThroughput(b *testing.B) {
	const batch = 1000
	dbs := []string{"sqlite"}
	if os.Getenv("RETRY_POSTGRES_URL") != "" {
		dbs = append(dbs, "postgres")
	}
	for _, db := range dbs {
		for _, withPolicy := range []bool{true, false} {
			name := db + "/river-default"
			if withPolicy {
				name = db + "/retryriver"
			}
			b.Run(name, func(b *testing.B) {
				var be backend
				if db == "sqlite" {
					be = sqliteBackend(b)
				} else {
					be = postgresBackend(b)
				}
				// The worker counts the jobs it has run and says when a batch is done.
				var ran atomic.Int64
				done := make(chan struct{}, 1)
				workers := river.NewWorkers()
				river.AddWorker(workers, &funcWorker{log: &attemptLog{}, fn: func(context.Context, *river.Job[failArgs]) error {
					if ran.Add(1)%batch == 0 {
						done <- struct{}{}
					}
					return nil
				}})
				cfg := &river.Config{
					Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
					Workers:       workers,
					FetchCooldown: 10 * time.Millisecond,
					Logger:        quietLogger(),
				}
				if withPolicy {
					cfg = retryriver.New(retry.Policy{MaxAttempts: 5}).Config(cfg)
				}
				c := be.client(b, cfg)
				inserter, ok := c.(interface {
					InsertMany(context.Context, []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
				})
				require.True(b, ok)
				start(b, c)
				params := make([]river.InsertManyParams, batch)
				for i := range params {
					params[i] = river.InsertManyParams{Args: failArgs{}}
				}
				var elapsed time.Duration
				for b.Loop() {
					t0 := time.Now()
					_, err := inserter.InsertMany(b.Context(), params)
					require.NoError(b, err)
					<-done
					elapsed += time.Since(t0)
				}
				b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "jobs/s")
			})
		}
	}
}
