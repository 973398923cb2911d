// Command postgres is a complete River setup on PostgreSQL under a
// retry.Policy: it connects to the database at $DATABASE_URL, brings
// River's tables up to date, and works one notification job whose first
// attempt fails and is retried.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

// NotifyArgs is a job: a notification to send.
type NotifyArgs struct {
	To string `json:"to"`
}

func (NotifyArgs) Kind() string { return "notify" }

// NotifyWorker sends notifications. Here the provider is busy the first
// time: a 503, which the policy retries after its backoff.
type NotifyWorker struct {
	river.WorkerDefaults[NotifyArgs]
}

func (w *NotifyWorker) Work(ctx context.Context, job *river.Job[NotifyArgs]) error {
	if job.Attempt == 1 {
		return &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"}
	}
	return nil // sent
}

func main() {
	// For example postgres://user:password@localhost:5432/app?sslmode=disable
	if err := run(context.Background(), os.Getenv("DATABASE_URL"), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Create River's tables, or bring them up to date; a no-op once they are.
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &NotifyWorker{})
	policy := retry.Policy{
		MaxAttempts:    5,
		Backoff:        retry.Exponential{Base: 200 * time.Millisecond, Cap: time.Minute},
		AttemptTimeout: 30 * time.Second, // also River's JobTimeout
	}
	client, err := river.NewClient(riverpgxv5.New(pool), retryriver.New(policy).Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
		// A retry runs at the client's first fetch after it comes due, and
		// a retry coming due is no event (LISTEN/NOTIFY announces inserts):
		// unless other jobs keep the client fetching, that is its next poll.
		// River polls every second (plus up to 10%) by default, so a retry
		// could start up to 1.1 s after it is due; polling every 100 ms, up
		// to 110 ms. FetchCooldown is the least time between two fetches.
		FetchPollInterval: 100 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
	}))
	if err != nil {
		return err
	}
	done, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return err
	}
	if _, err := client.Insert(ctx, NotifyArgs{To: "ada@example.com"}, nil); err != nil {
		return err
	}
	for {
		select {
		case ev := <-done:
			if ev.Kind == river.EventKindJobFailed && ev.Job.State != rivertype.JobStateDiscarded {
				fmt.Fprintf(out, "attempt %d failed (%s): retried\n", ev.Job.Attempt, ev.Job.Errors[len(ev.Job.Errors)-1].Error)
				continue
			}
			fmt.Fprintf(out, "attempt %d: %s\n", ev.Job.Attempt, ev.Job.State)
			return client.Stop(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
