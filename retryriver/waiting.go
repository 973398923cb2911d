package retryriver

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// JobLister is what [OldestWaiting] needs of a River client: a
// *river.Client of any driver has it.
type JobLister interface {
	JobList(ctx context.Context, params *river.JobListParams) (*river.JobListResult, error)
}

// Waiting is the oldest job of one queue and kind that waits for a retry
// or for the policy's bounds: see [OldestWaiting].
type Waiting struct {
	Queue string
	Kind  string

	// JobID is the job's ID: the lowest of the waiting jobs of its queue
	// and kind, the first inserted.
	JobID int64

	// CreatedAt is when the job was inserted: time.Since(CreatedAt) is how
	// long its work has been delayed, waits for River's workers included.
	CreatedAt time.Time

	// For says what it waits for: "retry" (an attempt failed and the next
	// is scheduled, or due and waiting for a worker), or the value of
	// [MetadataHeld] when the policy's bounds hold it back: "slot",
	// "breaker" or "store".
	For string
}

// OldestWaiting returns, for each queue and kind that has jobs waiting for
// a retry or for the policy's bounds, the oldest of them, sorted by queue
// and then kind; none when no job waits. A job waits when it is retryable
// (an attempt failed, the next is scheduled), or available or scheduled
// after an attempt (its retry is due, or its worker snoozed it), or snoozed
// by the [Middleware] because its bounds refused it ([MetadataHeld] set:
// no slot, an open breaker, a store down). A job that has never run and
// was never held (new, or scheduled for later when inserted) is not
// delayed work, and does not count; nor does a running or finished job.
//
// It reads River's job table through jobs, a River client (one that only
// inserts will do): one query for each queue and kind it finds, plus one,
// each for a single row, in ID order, on the index River keeps on state.
// Run it where metrics are collected, every few seconds, not per job. It
// returns the first error a query returns, or ctx's. The ages are of the
// whole table, so every process reads the same: report them from one
// process, or with an attribute that tells processes apart. It is safe for
// concurrent use.
//
// The README shows it wired to an OpenTelemetry gauge.
func OldestWaiting(ctx context.Context, jobs JobLister) ([]Waiting, error) {
	var (
		out     []Waiting
		exclude strings.Builder
		args    = river.NamedArgs{}
	)
	for {
		params := river.NewJobListParams().
			States(rivertype.JobStateRetryable, rivertype.JobStateAvailable, rivertype.JobStateScheduled).
			Where("(state = 'retryable' OR attempt > 0 OR metadata ->> '"+MetadataHeld+"' IS NOT NULL)"+exclude.String(), args).
			OrderBy(river.JobListOrderByID, river.SortOrderAsc).
			First(1)
		res, err := jobs.JobList(ctx, params)
		if err != nil {
			return nil, err
		}
		if len(res.Jobs) == 0 {
			break
		}
		job := res.Jobs[0]
		out = append(out, Waiting{Queue: job.Queue, Kind: job.Kind, JobID: job.ID, CreatedAt: job.CreatedAt, For: waitingFor(job)})
		// The next query leaves out the groups already found.
		n := strconv.Itoa(len(out))
		exclude.WriteString(" AND NOT (queue = @retry_q" + n + " AND kind = @retry_k" + n + ")")
		args["retry_q"+n], args["retry_k"+n] = job.Queue, job.Kind
	}
	slices.SortFunc(out, func(a, b Waiting) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// waitingFor says what a waiting job waits for.
func waitingFor(job *rivertype.JobRow) string {
	if held := readState(job.Metadata).Held; held != "" && job.State != rivertype.JobStateRetryable {
		return held
	}
	return "retry"
}
