package retryriver_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry/retryriver"
)

// The key is made of the job's row alone: every attempt of a job, in any
// process, gets the same one, and two jobs never share one.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	created := time.Date(2025, 12, 1, 22, 0, 0, 123456789, time.UTC)
	job := &rivertype.JobRow{ID: 42, Kind: "notify", CreatedAt: created, Attempt: 1}
	key := retryriver.IdempotencyKey(job)
	assert.Equal(t, "river:notify:42:1764626400123456", key)

	again := *job
	again.Attempt, again.Errors = 3, []rivertype.AttemptError{{Error: "timeout"}}
	assert.Equal(t, key, retryriver.IdempotencyKey(&again), "the same on a later attempt")
	local := *job
	local.CreatedAt = created.In(time.FixedZone("elsewhere", 5*3600))
	assert.Equal(t, key, retryriver.IdempotencyKey(&local), "whatever the process's time zone")

	other := *job
	other.ID = 43
	assert.NotEqual(t, key, retryriver.IdempotencyKey(&other))
	reused := *job
	reused.CreatedAt = created.Add(time.Hour)
	assert.NotEqual(t, key, retryriver.IdempotencyKey(&reused), "an ID reused after a reset")
	assert.Empty(t, retryriver.IdempotencyKey(nil))
}
