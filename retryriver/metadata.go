package retryriver

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// The keys the middleware writes into a job's metadata (River's metadata
// column, JSON), through river.MetadataSet, so that they are stored with the
// attempt's outcome in the same update. They are part of the contract: the
// reconciliation query in the package documentation reads them.
const (
	// MetadataOutcomeUnknown holds the attempt numbers, in order, whose
	// outcome is unknown: the attempt may have taken effect although it
	// failed (retry.OutcomeUnknown held for its error: a timeout, a broken
	// connection), River cut it off (the job cancelled remotely, a client
	// stopping with StopAndCancel or its SoftStopTimeout), its worker
	// panicked, or it never reported its end (its worker process died, or
	// River's rescuer took the job back from a worker that hung). Absent
	// when there are none. An attempt number can repeat in River (a snooze
	// or an interrupted run gives it back); it is listed once.
	MetadataOutcomeUnknown = "retry_outcome_unknown"
	// MetadataStop holds why the policy stopped the job, the text of the
	// core's reason without its "retry: " prefix: "attempts exhausted",
	// "error not retryable", "no time left before the deadline", "retry
	// budget exhausted", "server delay above MaxRetryAfter", "no
	// concurrency slot" (only with a deadline that a wait for a slot would
	// pass), "circuit breaker open until" and the time (only with a
	// deadline that comes before it).
	MetadataStop = "retry_stop"
	// MetadataWait holds the wait scheduled after the last failed attempt,
	// as a Go duration ("1.5s"): the prev argument of retry.Next for the
	// next decision (Decorrelated backoff depends on it).
	MetadataWait = "retry_wait"
	// MetadataAttempt holds the number of the last attempt whose end the
	// middleware saw (a failure it decided on, a run River cut off, a
	// panic). An attempt between it and the job's
	// current one ended without a word (its worker died, or the rescuer
	// took it back), unless River stored an error of its own for it: then
	// it failed before any worker ran.
	MetadataAttempt = "retry_attempt"
	// MetadataHeld holds why the job waits, snoozed, without an attempt
	// counted, while the policy's bounds refuse to let it start: "slot"
	// (no Concurrency slot), "breaker" (the Breaker is open) or "store" (a
	// shared Limiter's or Concurrency's store is down and fails closed).
	// It is set to null when the job is next let through. [OldestWaiting]
	// reads it.
	MetadataHeld = "retry_held"

	// metadataDeposited is true once the job's first attempt has deposited
	// in the policy's Budget. River gives a snoozed or interrupted attempt
	// its number back, so attempt 1 can run several times; this keeps it
	// from depositing each time. It is written when the deposit is made, so
	// every outcome of that run (success, error, snooze, stop, panic)
	// stores it.
	metadataDeposited = "retry_deposited"
)

// The values of MetadataHeld.
const (
	heldSlot    = "slot"
	heldBreaker = "breaker"
	heldStore   = "store"
)

// state is what the middleware keeps in a job's metadata between attempts.
type state struct {
	Unknown   []int  `json:"retry_outcome_unknown"`
	Wait      string `json:"retry_wait"`
	Attempt   *int   `json:"retry_attempt"`
	Deposited bool   `json:"retry_deposited"`
	Held      string `json:"retry_held"`
	prevWait  time.Duration
}

// readState parses the middleware's keys from a job's metadata. Metadata it
// cannot read counts as empty: losing the previous wait only changes the
// Decorrelated backoff's input, and a job must not fail for it.
func readState(metadata []byte) state {
	var s state
	// Most jobs have none of our keys: their first attempt, and every job
	// that never failed. Skip the JSON parse for them.
	if !bytes.Contains(metadata, []byte(`"retry_`)) || json.Unmarshal(metadata, &s) != nil {
		return state{}
	}
	if d, err := time.ParseDuration(s.Wait); err == nil && d > 0 {
		s.prevWait = d
	}
	return s
}

// lostAttempts adds to the recorded unknown attempts those before attempt
// that ended without the middleware seeing their end, and reports whether
// it added any. Such an attempt's worker died, or hung until River's
// rescuer took the job back: either way it may have done work. Left out is
// an attempt that River failed before the middleware ran, so that no worker
// ran (the client that fetched it did not know its kind, as in a rolling
// deploy; its row could not be decoded; a middleware before this one
// refused it): River stored an error for it that is not the rescuer's.
func (s *state) lostAttempts(attempt int, errs []rivertype.AttemptError) bool {
	last := 0
	if s.Attempt != nil {
		last = *s.Attempt
	}
	added := false
	for a := last + 1; a < attempt; a++ {
		if !slices.Contains(s.Unknown, a) && !neverRan(a, errs) {
			s.Unknown = append(s.Unknown, a)
			added = true
		}
	}
	return added
}

// rescuedError is the error River's rescuer stores for the attempt of a job
// it takes back from a worker that ran too long (River v0.51.2,
// internal/maintenance/job_rescuer.go). TestRescuedAttemptIsMarked fails if
// a River upgrade changes it, and so would the reconciliation query.
const rescuedError = "Stuck job rescued by JobRescuer"

// neverRan reports whether River stored an error for attempt that is not
// the rescuer's: an attempt the middleware did not see end but River
// failed itself ended before any worker ran.
func neverRan(attempt int, errs []rivertype.AttemptError) bool {
	failed := false
	for _, e := range errs {
		if e.Attempt == attempt {
			if e.Error == rescuedError {
				return false
			}
			failed = true
		}
	}
	return failed
}

// mark records attempt as outcome-unknown, once.
func (s *state) mark(attempt int) {
	if !slices.Contains(s.Unknown, attempt) {
		s.Unknown = append(s.Unknown, attempt)
	}
}
