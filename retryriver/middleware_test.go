package retryriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/retryriver"
)

var errFlaky = errors.New("flaky provider")

// seeded returns a Policy.Rand that gives the same draws for the same seed,
// safe for concurrent use.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// runJob starts a client with m on b, inserts one job whose worker calls fn,
// and returns the job once it is final, with the attempts the worker saw.
func runJob(t *testing.T, b backend, m *retryriver.Middleware, fn func(context.Context, *river.Job[failArgs]) error) (*rivertype.JobRow, []run) {
	t.Helper()
	log := &attemptLog{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &funcWorker{log: log, fn: fn})
	c := b.client(t, fast(m.Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers: workers,
	})))
	start(t, c)
	res, err := c.Insert(t.Context(), failArgs{Name: t.Name()}, nil)
	require.NoError(t, err)
	job := waitFinal(t, c, res.Job.ID)
	return job, log.all()
}

func metadata(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var md map[string]any
	require.NoError(t, json.Unmarshal(raw, &md))
	return md
}

// A transient error schedules each retry at the time retry.Next gives for
// the same seeded draws, a server delay included, until the attempts run out.
func TestTransientErrorsFollowNext(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			policy := retry.Policy{
				MaxAttempts: 4,
				Backoff:     retry.Exponential{Base: 40 * time.Millisecond, Cap: 200 * time.Millisecond},
			}
			// The error of each attempt: the second carries a server delay
			// longer than any backoff of this policy.
			errOf := func(attempt int) error {
				if attempt == 2 {
					return retry.RetryAfter(errFlaky, 250*time.Millisecond)
				}
				return errFlaky
			}
			run := policy
			run.Rand = seeded(7)
			var mu sync.Mutex
			var retried []time.Time // when Observe saw each retry, just after its decision
			run.Observe = func(_ context.Context, e retry.Event) {
				if !e.Retry {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				retried = append(retried, time.Now())
			}
			job, runs := runJob(t, b, retryriver.New(run), func(_ context.Context, job *river.Job[failArgs]) error {
				return errOf(job.Attempt)
			})

			require.Len(t, runs, 4)
			require.Len(t, retried, 3, "retries observed")
			want := policy
			u := seeded(7)
			var prev time.Duration
			for k := 1; k < 4; k++ {
				wait, stop := retry.Next(want, k, prev, errOf(k), time.Now(), time.Time{}, u())
				require.NoError(t, stop)
				prev = wait
				next := runs[k] // attempt k+1, which sees what attempt k stored
				assert.Equal(t, k+1, next.attempt)
				md := metadata(t, next.metadata)
				assert.Equal(t, wait.String(), md[retryriver.MetadataWait], "stored wait after attempt %d", k)
				// Work decided after attempt k returned and before Observe saw
				// the retry; the database may round to the millisecond (SQLite)
				// or microsecond (PostgreSQL).
				const slack = time.Millisecond
				decided := next.scheduledAt.Add(-wait)
				assert.False(t, decided.Before(runs[k-1].end.Add(-slack)),
					"attempt %d: scheduled_at %v - wait %v = %v, before the attempt ended at %v", k, next.scheduledAt, wait, decided, runs[k-1].end)
				assert.False(t, decided.After(retried[k-1].Add(slack)),
					"attempt %d: scheduled_at %v - wait %v = %v, after the decision was reported at %v", k, next.scheduledAt, wait, decided, retried[k-1])
				assert.False(t, next.start.Before(next.scheduledAt.Add(-slack)), "attempt %d started before it was due", k+1)
			}
			assert.GreaterOrEqual(t, runs[2].start.Sub(runs[1].end), 250*time.Millisecond, "the server's delay was not honoured")

			assert.Equal(t, rivertype.JobStateDiscarded, job.State)
			require.Len(t, job.Errors, 4, "every attempt's error is kept")
			for i, e := range job.Errors {
				assert.Equal(t, i+1, e.Attempt)
				assert.Contains(t, e.Error, errFlaky.Error())
			}
			assert.Equal(t, "retry: gave up after 4 attempts (attempts exhausted): flaky provider", job.Errors[3].Error)
			assert.Equal(t, "attempts exhausted", metadata(t, job.Metadata)[retryriver.MetadataStop])
		})
	}
}

// An error the policy stops on cancels the job after that attempt, with the
// error kept and the reason recorded.
func TestStopCancelsAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy retry.Policy
		opts   []retryriver.Option
		err    error
		reason string
	}{
		{"permanent", retry.Policy{}, nil, retry.Permanent(errFlaky), "error not retryable"},
		{"classified stop", retry.Policy{}, nil, &retry.ResponseError{StatusCode: 404, Status: "404 Not Found"}, "error not retryable"},
		{"server delay above MaxRetryAfter", retry.Policy{MaxRetryAfter: time.Minute}, nil,
			retry.RetryAfter(errFlaky, time.Hour), "server delay above MaxRetryAfter"},
		{"budget refuses the retry", retry.Policy{Budget: retry.NewBudget(0.1, 0)}, nil, errFlaky, "retry budget exhausted"},
		{"retry would pass the deadline", retry.Policy{Backoff: retry.Constant(time.Hour)},
			[]retryriver.Option{retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time { return job.CreatedAt.Add(30 * time.Minute) })},
			errFlaky, "no time left before the deadline"},
	}
	for _, b := range backends(t) {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				b := b
				if b.name == "sqlite" {
					b = sqliteBackend(t) // a file per subtest
				} else {
					b = postgresBackend(t)
				}
				job, runs := runJob(t, b, retryriver.New(tt.policy, tt.opts...), func(context.Context, *river.Job[failArgs]) error {
					return tt.err
				})
				assert.Equal(t, rivertype.JobStateCancelled, job.State)
				assert.Len(t, runs, 1, "attempts made")
				require.Len(t, job.Errors, 1)
				assert.Contains(t, job.Errors[0].Error, tt.err.Error())
				assert.Contains(t, job.Errors[0].Error, "retry: gave up after 1 attempt ("+tt.reason+")")
				assert.Equal(t, tt.reason, metadata(t, job.Metadata)[retryriver.MetadataStop])
			})
		}
	}
}

// A job whose deadline has passed is cancelled without an attempt.
func TestNoAttemptAfterDeadline(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			m := retryriver.New(retry.Policy{}, retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time {
				return job.CreatedAt.Add(-time.Second)
			}))
			job, runs := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error { return nil })
			assert.Empty(t, runs, "the worker ran after the deadline")
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.Len(t, job.Errors, 1)
			assert.Contains(t, job.Errors[0].Error, "retry: gave up before the first attempt (no time left before the deadline)")
		})
	}
}

// Attempts whose outcome is unknown are marked on the job, and the
// documented query finds the jobs that stopped with such an attempt.
func TestOutcomeUnknownIsMarkedAndReconciled(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			m := retryriver.New(retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(time.Millisecond), AttemptTimeout: 20 * time.Millisecond})
			log := &attemptLog{}
			workers := river.NewWorkers()
			river.AddWorker(workers, &funcWorker{log: log, fn: func(ctx context.Context, job *river.Job[failArgs]) error {
				switch {
				case job.Args.Name == "timeout then success" && job.Attempt == 1,
					job.Args.Name == "always timeout":
					<-ctx.Done() // the provider never answers: the attempt times out
					return ctx.Err()
				case job.Args.Name == "always 503":
					return &retry.ResponseError{StatusCode: 503}
				}
				return nil
			}})
			c := b.client(t, fast(m.Config(&river.Config{
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
				Workers: workers,
			})))
			start(t, c)
			ids := map[string]int64{}
			for _, name := range []string{"timeout then success", "always timeout", "always 503"} {
				res, err := c.Insert(t.Context(), failArgs{Name: name}, nil)
				require.NoError(t, err)
				ids[name] = res.Job.ID
			}
			jobs := map[string]*rivertype.JobRow{}
			for name, id := range ids {
				jobs[name] = waitFinal(t, c, id)
			}
			unknown := func(name string) any { return metadata(t, jobs[name].Metadata)[retryriver.MetadataOutcomeUnknown] }

			assert.Equal(t, rivertype.JobStateCompleted, jobs["timeout then success"].State)
			assert.Equal(t, []any{1.0}, unknown("timeout then success"))
			assert.Equal(t, rivertype.JobStateDiscarded, jobs["always timeout"].State)
			assert.Equal(t, []any{1.0, 2.0}, unknown("always timeout"))
			assert.Contains(t, jobs["always timeout"].Errors[1].Error, "context deadline exceeded")
			assert.Equal(t, rivertype.JobStateDiscarded, jobs["always 503"].State)
			assert.Nil(t, unknown("always 503"), "a 503 proves the request was not carried out")

			assert.Equal(t, []int64{ids["always timeout"]}, b.query(t, b.reconcile))
		})
	}
}

// The budget gets a deposit at a job's first attempt and pays for each
// retry: with a ratio of 1, one retry per job.
func TestBudgetCountsFirstAttemptsAndRetries(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			budget := retry.NewBudget(1, 0)
			m := retryriver.New(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond), Budget: budget})
			job, runs := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error { return errFlaky })
			assert.Len(t, runs, 2, "one deposit pays for one retry")
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			assert.Equal(t, "retry budget exhausted", metadata(t, job.Metadata)[retryriver.MetadataStop])
			assert.Zero(t, budget.Balance())
		})
	}
}

// The limiter paces every attempt a worker process makes.
func TestLimiterPacesAttempts(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const every, jobs = 50 * time.Millisecond, 6
			m := retryriver.New(retry.Policy{Limiter: retry.RateLimiter(rate.NewLimiter(rate.Every(every), 1))})
			log := &attemptLog{}
			workers := river.NewWorkers()
			river.AddWorker(workers, &funcWorker{log: log, fn: func(context.Context, *river.Job[failArgs]) error { return nil }})
			c := b.client(t, fast(m.Config(&river.Config{
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: jobs}},
				Workers: workers,
			})))
			var ids []int64
			for i := range jobs {
				res, err := c.Insert(t.Context(), failArgs{Name: string(rune('a' + i))}, nil)
				require.NoError(t, err)
				ids = append(ids, res.Job.ID)
			}
			// No slot is before this: the limiter's one token is taken at the
			// first booking, after it, and each next one every 50 ms.
			began := time.Now()
			start(t, c)
			for _, id := range ids {
				assert.Equal(t, rivertype.JobStateCompleted, waitFinal(t, c, id).State)
			}
			var starts []time.Time
			for _, r := range log.all() {
				starts = append(starts, r.start)
			}
			slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
			require.Len(t, starts, jobs)
			for i := 1; i < jobs; i++ {
				// A token every 50 ms, burst 1: the i-th slot is at least i
				// times 50 ms after the start, and no attempt starts before its
				// slot, so neither does the i-th start, however late a busy
				// machine wakes any of them (the first included, which a
				// bound from the first start would have to assume on time); a
				// millisecond covers the timers' own granularity.
				assert.GreaterOrEqual(t, starts[i].Sub(began), time.Duration(i)*every-time.Millisecond, "attempt %d", i+1)
			}
		})
	}
}

// A job inserted with its own max_attempts keeps it, and the policy follows.
func TestJobMaxAttemptsWins(t *testing.T) {
	t.Parallel()
	b := sqliteBackend(t)
	m := retryriver.New(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond)})
	log := &attemptLog{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &funcWorker{log: log, fn: func(context.Context, *river.Job[failArgs]) error { return errFlaky }})
	c := b.client(t, fast(m.Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers,
	})))
	start(t, c)
	res, err := c.Insert(t.Context(), failArgs{}, &river.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	job := waitFinal(t, c, res.Job.ID)
	assert.Equal(t, rivertype.JobStateDiscarded, job.State)
	assert.Len(t, job.Errors, 2)
	assert.Equal(t, "retry: gave up after 2 attempts (attempts exhausted): flaky provider", job.Errors[1].Error)
}

// Without a decision from Work (a panic, a job rescued from a dead worker),
// NextRetry applies the policy's backoff to the attempt, with the wait
// stored last time as Decorrelated's prev.
func TestNextRetryWithoutDecisionUsesBackoff(t *testing.T) {
	t.Parallel()
	policy := retry.Policy{Backoff: retry.Decorrelated{Base: time.Second, Cap: time.Hour}, Rand: func() float64 { return 0.5 }}
	m := retryriver.New(policy)
	job := &rivertype.JobRow{ID: 1, Attempt: 3, MaxAttempts: 5, Metadata: []byte(`{"retry_wait": "4s"}`)}
	want := retry.Decorrelated{Base: time.Second, Cap: time.Hour}.Delay(3, 4*time.Second, 0.5) // 1s + 0.5*(12s-1s)
	before := time.Now()
	got := m.NextRetry(job)
	after := time.Now()
	assert.False(t, got.Before(before.Add(want)), "NextRetry = %v, want now + %v", got, want)
	assert.False(t, got.After(after.Add(want)), "NextRetry = %v, want now + %v", got, want)

	// A deadline that leaves no time for the backoff: the deadline, where the
	// next attempt's Work stops the job without running it; never now, which
	// would run it again at once.
	deadline := time.Now().Add(time.Second).Truncate(time.Microsecond)
	m = retryriver.New(policy, retryriver.WithDeadline(func(*rivertype.JobRow) time.Time { return deadline }))
	assert.Equal(t, deadline.UTC(), m.NextRetry(job), "NextRetry with a deadline the backoff does not fit")

	// A deadline already passed: now (River refuses a time in the past), and
	// the next Work stops the job at once.
	passed := time.Now().Add(-time.Second)
	m = retryriver.New(policy, retryriver.WithDeadline(func(*rivertype.JobRow) time.Time { return passed }))
	before = time.Now()
	got = m.NextRetry(job)
	assert.False(t, got.Before(before), "NextRetry = %v, before now %v", got, before)
	assert.False(t, got.After(time.Now()), "NextRetry = %v, want now", got)
}

func TestMaxAttemptsAgreesWithPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct{ policy, want int }{{0, 4}, {1, 1}, {5, 5}, {-1, 32767}, {1 << 20, 32767}}
	for _, tt := range tests {
		m := retryriver.New(retry.Policy{MaxAttempts: tt.policy})
		assert.Equal(t, tt.want, m.MaxAttempts(), "MaxAttempts with Policy.MaxAttempts %d", tt.policy)
		assert.Equal(t, tt.want, m.Config(nil).MaxAttempts)
	}
}

// Config sets what it must and leaves the caller's config alone.
func TestConfigCopies(t *testing.T) {
	t.Parallel()
	other := &otherMiddleware{}
	user := &river.Config{Middleware: make([]rivertype.Middleware, 1, 4), MaxAttempts: 25}
	user.Middleware[0] = other
	m := retryriver.New(retry.Policy{MaxAttempts: 3})
	got := m.Config(user)
	assert.Equal(t, []rivertype.Middleware{other, m}, got.Middleware)
	assert.Same(t, m, got.RetryPolicy)
	assert.Equal(t, 3, got.MaxAttempts)
	assert.Equal(t, 25, user.MaxAttempts, "the caller's config was changed")
	assert.Nil(t, user.RetryPolicy)
	assert.Len(t, user.Middleware, 1)
	assert.Nil(t, user.Middleware[:2][1], "Config wrote into the caller's slice")
}

type otherMiddleware struct{ river.MiddlewareDefaults }

// A worker that panics leaves NextRetry without a decision. When the
// policy's backoff does not fit before the job's deadline, the job must stop
// (cancelled, no time left) instead of being run again at once: before the
// fix NextRetry returned now, and River reran the panicking job back to back
// until the deadline.
func TestPanicWithNoTimeLeftStops(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const left = 2 * time.Second
			m := retryriver.New(retry.Policy{MaxAttempts: 20, Backoff: retry.Constant(10 * time.Second)},
				retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time { return job.CreatedAt.Add(left) }))
			var runs atomic.Int32
			job, _ := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error {
				runs.Add(1)
				panic("worker bug")
			})
			assert.Equal(t, int32(1), runs.Load(), "runs of a job whose retry cannot fit before its deadline")
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			require.Equal(t, 2, len(job.Errors), "errors stored: the panic, then the stop")
			assert.Contains(t, job.Errors[1].Error, "retry: gave up after 1 attempt (no time left before the deadline)")
			assert.Equal(t, "no time left before the deadline", metadata(t, job.Metadata)[retryriver.MetadataStop])
		})
	}
}

// A snooze gives the job its attempt number back, so a job snoozed at its
// first attempt comes back as attempt 1 again: it must not deposit in the
// Budget again. With a ratio of 1, one job earns one retry however often it
// snoozed first; before the fix each of its 4 snoozes deposited again and
// paid for 4 more retries.
func TestSnoozeDepositsOnce(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			budget := retry.NewBudget(1, 0)
			m := retryriver.New(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond), Budget: budget})
			var runs atomic.Int32
			job, attempts := runJob(t, b, m, func(_ context.Context, job *river.Job[failArgs]) error {
				if runs.Add(1) <= 4 {
					return river.JobSnooze(time.Millisecond)
				}
				return errFlaky
			})
			assert.Equal(t, int32(6), runs.Load(), "4 snoozes, the first attempt and its one paid retry")
			var numbers []int
			for _, r := range attempts {
				numbers = append(numbers, r.attempt)
			}
			assert.Equal(t, []int{1, 1, 1, 1, 1, 2}, numbers, "attempt numbers River gave the runs")
			assert.Equal(t, rivertype.JobStateCancelled, job.State)
			assert.Equal(t, "retry budget exhausted", metadata(t, job.Metadata)[retryriver.MetadataStop])
			assert.Zero(t, budget.Balance())
		})
	}
}

// downStore is a fleet.Store that is down for its first bookings: each
// fails as a store that refuses connections does.
type downStore struct {
	mu   sync.Mutex
	down int // bookings left to fail
	end  time.Duration
}

func (s *downStore) Book(_ context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down > 0 {
		s.down--
		return 0, 0, errors.New("connect: connection refused")
	}
	s.end += time.Duration(n) * sc.Interval // far below the rate: every booking starts at once
	return after, int64(s.end), nil
}

func (s *downStore) Refund(context.Context, fleet.Schedule, int64, int) (bool, error) {
	return false, nil
}

// A shared limiter that fails closed while its store is down makes the job
// wait, snoozed with its attempt number given back, instead of cancelling
// it: once the store answers, its first attempt runs and delivers.
func TestLimiterStoreDownSnoozes(t *testing.T) {
	t.Parallel()
	b := sqliteBackend(t)
	lim, err := fleet.New(&downStore{down: 2}, 100, 1, nil)
	require.NoError(t, err)
	m := retryriver.New(retry.Policy{Limiter: lim})
	job, runs := runJob(t, b, m, func(context.Context, *river.Job[failArgs]) error { return nil })
	assert.Equal(t, rivertype.JobStateCompleted, job.State)
	require.Len(t, runs, 1, "the worker ran once: while the store was down no attempt started")
	assert.Equal(t, 1, runs[0].attempt, "the snoozes gave the attempt number back")
	assert.Empty(t, job.Errors)
}
