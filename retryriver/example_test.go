package retryriver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

type emailWorker struct {
	river.WorkerDefaults[emailArgs]
}

// The mail provider refuses the address: retrying cannot help.
func (emailWorker) Work(ctx context.Context, job *river.Job[emailArgs]) error {
	return retry.Permanent(errors.New("550 no such mailbox"))
}

// One line where River is configured runs every job under the policy. Here
// a permanent error cancels the job after its first attempt, with the error
// kept; a transient one would be retried at the time retry.Next gives.
func Example() {
	dir, _ := os.MkdirTemp("", "retryriver-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", filepath.Join(dir, "river.sqlite"))
	db.SetMaxOpenConns(1)
	defer db.Close()
	ctx := context.Background()
	migrator, _ := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: quietLogger()})
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		fmt.Println(err)
		return
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, emailWorker{})
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Exponential{Base: time.Second, Cap: time.Minute}}

	client, err := river.NewClient(riversqlite.New(db), retryriver.New(policy).Config(&river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
		Logger:  quietLogger(),
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	done, stop := client.Subscribe(river.EventKindJobCancelled)
	defer stop()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)
	res, _ := client.Insert(ctx, emailArgs{To: "nobody@example.com"}, nil)
	<-done

	job, _ := client.JobGet(ctx, res.Job.ID)
	fmt.Println(job.State == rivertype.JobStateCancelled, job.Attempt, job.MaxAttempts)
	fmt.Println(job.Errors[0].Error)
	// River prefixes the stored error of a cancelled job with "JobCancelError: ".

	// Output:
	// true 1 5
	// JobCancelError: retry: gave up after 1 attempt (error not retryable): 550 no such mailbox
}
