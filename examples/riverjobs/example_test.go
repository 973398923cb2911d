package riverjobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/riverjobs"
	"github.com/seed93a044d1/retry/retryriver"
)

type syncArgs struct {
	Account string `json:"account"`
}

func (syncArgs) Kind() string { return "sync_account" }

// syncWorker's provider resets the connection twice, then answers.
type syncWorker struct {
	river.WorkerDefaults[syncArgs]
}

func (syncWorker) Work(ctx context.Context, job *river.Job[syncArgs]) error {
	if job.Attempt <= 2 {
		return syscall.ECONNRESET
	}
	return nil
}

// From an empty SQLite file to a job retried twice and completed. The
// policy waits 10ms between attempts so that the example runs at once; River
// picks a retry up at its next fetch, every 50ms here (every second by
// default).
func Example() {
	dir, err := os.MkdirTemp("", "riverjobs")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	db, err := riverjobs.Open(ctx, filepath.Join(dir, "jobs.sqlite"), quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	workers := river.NewWorkers()
	river.AddWorker(workers, syncWorker{})
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(10 * time.Millisecond)}
	client, err := river.NewClient(riversqlite.New(db), retryriver.New(policy).Config(&river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            quiet,
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	completed, stop := client.Subscribe(river.EventKindJobCompleted)
	defer stop()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)

	res, err := client.Insert(ctx, syncArgs{Account: "42"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	select {
	case <-completed:
	case <-time.After(time.Minute):
		fmt.Println("the job did not complete within a minute")
		return
	}
	job, err := client.JobGet(ctx, res.Job.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.State, "at attempt", job.Attempt, "of", job.MaxAttempts)
	for _, e := range job.Errors {
		fmt.Printf("attempt %d: %s\n", e.Attempt, e.Error)
	}
	// Output:
	// completed at attempt 3 of 5
	// attempt 1: connection reset by peer
	// attempt 2: connection reset by peer
}
