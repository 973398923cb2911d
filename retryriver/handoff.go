package retryriver

import (
	"sync"
	"time"
)

// handoff carries a retry decision from Work, which sees the attempt's typed
// error, to NextRetry, which River calls after Work returns but with nothing
// but the job row (whose Errors do not yet hold this attempt's error).
//
// River's executor calls both in the same process, one after the other, for
// the same job ID and attempt number, so a map keyed by job ID, checked
// against the attempt, is all it takes. It does not rely on River passing
// the same *JobRow to both (it does today, but that is not documented).
//
// An entry is taken by NextRetry. River does not call NextRetry when
// something else decides the job's fate after Work returned a retryable error
// (an ErrorHandler that cancels it, a worker's own NextRetry); such entries
// are swept once they are older than staleAfter, checked at most once per
// staleAfter, so the map stays as small as the number of jobs in flight.
type handoff struct {
	mu      sync.Mutex
	next    map[int64]decision
	sweptAt time.Time
}

type decision struct {
	attempt int
	at      time.Time // when the next attempt is due
	made    time.Time // when Work decided, for the sweep
}

// staleAfter is how long an entry waits for NextRetry, which River calls
// within milliseconds of Work returning.
const staleAfter = time.Minute

// put records that job id's attempt failed and its next attempt is due at at.
func (h *handoff) put(id int64, attempt int, at, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.next == nil {
		h.next = make(map[int64]decision)
		h.sweptAt = now
	}
	if now.Sub(h.sweptAt) >= staleAfter {
		for k, d := range h.next {
			if now.Sub(d.made) >= staleAfter {
				delete(h.next, k)
			}
		}
		h.sweptAt = now
	}
	h.next[id] = decision{attempt: attempt, at: at, made: now}
}

// take returns and forgets the time Work decided for job id's attempt.
func (h *handoff) take(id int64, attempt int) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.next[id]
	if !ok {
		return time.Time{}, false
	}
	delete(h.next, id)
	if d.attempt != attempt {
		return time.Time{}, false
	}
	return d.at, true
}

// len returns the number of decisions waiting, for tests.
func (h *handoff) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.next)
}
