package retryriver

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
)

// The keys the middleware writes into a job's metadata (River's metadata
// column, JSON), through river.MetadataSet, so that they are stored with the
// attempt's outcome in the same update. They are part of the contract: the
// reconciliation query in the package documentation reads them.
const (
	// MetadataOutcomeUnknown holds the attempt numbers, in order, whose
	// outcome is unknown: the attempt may have taken effect although it
	// failed (retry.OutcomeUnknown held for its error: a timeout, a broken
	// connection), or it never reported its end because the worker process
	// died during it. Absent when there are none.
	MetadataOutcomeUnknown = "retry_outcome_unknown"
	// MetadataStop holds why the policy stopped the job, the text of the
	// core's reason without its "retry: " prefix: "attempts exhausted",
	// "error not retryable", "no time left before the deadline", "retry
	// budget exhausted", "server delay above MaxRetryAfter".
	MetadataStop = "retry_stop"
	// MetadataWait holds the wait scheduled after the last failed attempt,
	// as a Go duration ("1.5s"): the prev argument of retry.Next for the
	// next decision (Decorrelated backoff depends on it).
	MetadataWait = "retry_wait"
	// MetadataAttempt holds the number of the last attempt whose end the
	// middleware saw. An attempt below the job's current one that is
	// neither recorded here nor snoozed ended without a word: its worker
	// died.
	MetadataAttempt = "retry_attempt"

	// metadataDeposited is true once the job's first attempt has deposited
	// in the policy's Budget. River gives a snoozed or interrupted attempt
	// its number back, so attempt 1 can run several times; this keeps it
	// from depositing each time. It is written when the deposit is made, so
	// every outcome of that run (success, error, snooze, stop, panic)
	// stores it.
	metadataDeposited = "retry_deposited"
)

// state is what the middleware keeps in a job's metadata between attempts.
type state struct {
	Unknown   []int  `json:"retry_outcome_unknown"`
	Wait      string `json:"retry_wait"`
	Attempt   *int   `json:"retry_attempt"`
	Deposited bool   `json:"retry_deposited"`
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

// lostAttempts returns the attempts before attempt that ended without the
// middleware seeing their end (the worker died during them), added to the
// recorded unknown ones. It reports whether it added any.
func (s *state) lostAttempts(attempt int) bool {
	last := 0
	if s.Attempt != nil {
		last = *s.Attempt
	}
	added := false
	for a := last + 1; a < attempt; a++ {
		if !slices.Contains(s.Unknown, a) {
			s.Unknown = append(s.Unknown, a)
			added = true
		}
	}
	return added
}
