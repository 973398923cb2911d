// Command sqlite is a complete River setup on SQLite under a retry.Policy:
// it opens the database, brings River's tables up to date, and works one
// notification job whose first attempt fails and is retried.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite", in pure Go

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
	if err := run(context.Background(), "jobs.sqlite", os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path string, out io.Writer) error {
	// WAL lets other connections and processes read while River writes; the
	// busy timeout makes a writer from another process wait for the lock
	// instead of failing at once.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	// One connection. SQLite lets one writer in at a time, and River writes
	// from many goroutines at once (fetching, completing, electing a
	// leader); on separate connections they fail with "database is locked"
	// (SQLITE_BUSY), while on one they take turns.
	db.SetMaxOpenConns(1)

	// Create River's tables, or bring them up to date; a no-op once they are.
	migrator, err := rivermigrate.New(riversqlite.New(db), nil)
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
	client, err := river.NewClient(riversqlite.New(db), retryriver.New(policy).Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
		// A retry runs at the client's first fetch after it comes due, and
		// a retry coming due is no event: unless other jobs keep the client
		// fetching, that is its next poll. River polls every second (plus up
		// to 10%) by default, so a retry could start up to 1.1 s after it is
		// due; polling every 100 ms, up to 110 ms. FetchCooldown is the
		// least time between two fetches.
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
