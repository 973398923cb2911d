package retryriver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHandoffTakesOnlyTheSameAttempt(t *testing.T) {
	t.Parallel()
	var h handoff
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := now.Add(time.Second)
	h.put(7, 2, at, now)
	_, ok := h.take(7, 3)
	assert.False(t, ok, "a decision for attempt 2 answered attempt 3")
	_, ok = h.take(7, 2)
	assert.False(t, ok, "a mismatched take must drop the stale decision")

	h.put(7, 2, at, now)
	got, ok := h.take(7, 2)
	assert.True(t, ok)
	assert.Equal(t, at, got)
	_, ok = h.take(7, 2)
	assert.False(t, ok, "a decision is taken once")
	assert.Zero(t, h.len())
}

// Decisions River never asks for (an ErrorHandler cancelled the job, a
// worker's own NextRetry) are swept once stale, so the map stays small.
func TestHandoffSweepsStaleDecisions(t *testing.T) {
	t.Parallel()
	var h handoff
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for id := range int64(100) {
		h.put(id, 1, now, now)
	}
	assert.Equal(t, 100, h.len())
	h.put(1000, 1, now, now.Add(staleAfter/2))
	assert.Equal(t, 101, h.len(), "nothing is stale yet")
	h.put(1001, 1, now, now.Add(staleAfter))
	assert.Equal(t, 2, h.len(), "the 100 stale decisions are gone, the two fresh ones stay")
}
