package ingest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim/ingest"
)

func small(c ingest.Config) ingest.Config {
	c.Writes = 5_000
	return c
}

func newAdaptive() ingest.Slots { return &adaptive.Concurrency{} }

// TestRunIsSeeded checks that a run depends only on its Config.
func TestRunIsSeeded(t *testing.T) {
	t.Parallel()
	a := ingest.Run(small(ingest.Variant(ingest.Names.Adaptive, ingest.StudyStorage(), 7, 0, newAdaptive)))
	b := ingest.Run(small(ingest.Variant(ingest.Names.Adaptive, ingest.StudyStorage(), 7, 0, newAdaptive)))
	assert.Equal(t, a, b)
}

// TestFixedLimitBoundsTheStorage checks the model's plumbing on a fixed
// limit: every write stored, never more in flight than the slots, nothing
// at the storage in the outage, and a drain near the backlog over the
// storage's throughput.
func TestFixedLimitBoundsTheStorage(t *testing.T) {
	t.Parallel()
	st := ingest.StudyStorage()
	r := ingest.Run(small(ingest.Variant(ingest.Names.Fixed, st, 1, 100, nil)))
	require.True(t, r.Drained)
	assert.Equal(t, 5_000, r.Stored)
	assert.Equal(t, 100, r.Peak)
	assert.Zero(t, r.TimedOut)
	for k := range int(st.Outage / ingest.TraceBin) {
		if k < len(r.HeldPeak) {
			assert.Zero(t, r.HeldPeak[k], "held at %v, in the outage", time.Duration(k)*ingest.TraceBin)
		}
	}
	want := time.Duration(float64(5_000) / st.Capacity(100) * float64(time.Second))
	assert.InDelta(t, want.Seconds(), r.Drain().Seconds(), 0.6, "drain %v, want about %v", r.Drain(), want)
	assert.Positive(t, r.InOutage)
}

// TestNoBoundTimesOut checks that the writers' own count, above what the
// storage serves within the timeout, makes attempts time out, and that
// the storage still holds the writes of those that did.
func TestNoBoundTimesOut(t *testing.T) {
	t.Parallel()
	r := ingest.Run(small(ingest.Variant(ingest.Names.None, ingest.StudyStorage(), 1, 0, nil)))
	assert.Positive(t, r.TimedOut)
	assert.Greater(t, r.Peak, ingest.Writers/2)
	assert.Equal(t, ingest.AttemptTimeout, r.Quantile(0.99))
}

// TestBreakerStopsOutageAttempts checks that a breaker keeps the writers
// from the storage while it is down, and that every write is still stored.
func TestBreakerStopsOutageAttempts(t *testing.T) {
	t.Parallel()
	c := small(ingest.Variant(ingest.Names.Fixed, ingest.StudyStorage(), 1, 100, nil))
	c.Policy.Breaker = &retry.CircuitBreaker{}
	r := ingest.Run(c)
	require.True(t, r.Drained)
	assert.Less(t, r.InOutage, 20)
	assert.Positive(t, r.Stopped)
}

// TestBest checks the choice in hindsight: the soonest drain, then the
// lowest p99 within 1% of it.
func TestBest(t *testing.T) {
	t.Parallel()
	res := func(done time.Duration, p99 time.Duration) ingest.Result {
		return ingest.Result{Drained: true, Done: done, Latencies: []time.Duration{p99}}
	}
	sweep := []ingest.Result{res(40*time.Second, time.Millisecond), res(20*time.Second, 9*time.Millisecond), res(20100*time.Millisecond, 5*time.Millisecond), {Done: time.Second}}
	assert.Equal(t, 2, ingest.Best(sweep))
}
