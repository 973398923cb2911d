package retryotel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

// ints returns the points of the integer gauge name, by attribute set.
func (m metrics) ints(t *testing.T, name string) map[string]int64 {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return nil
	}
	g, ok := md.Data.(metricdata.Gauge[int64])
	require.Truef(t, ok, "%s is a %T, want a Gauge[int64]", name, md.Data)
	out := map[string]int64{}
	for _, p := range g.DataPoints {
		out[key(p.Attributes)] = p.Value
	}
	return out
}

// concurrencyGauges returns the three gauges of one collection, keyed by
// name, for the attribute set "peer.service=payments".
func concurrencyGauges(t *testing.T, m metrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, name := range []string{"retry.concurrency.active", "retry.concurrency.limit", "retry.concurrency.pending"} {
		for set, v := range m.ints(t, name) {
			require.Equal(t, "peer.service=payments", set, name)
			out[name] = v
		}
	}
	return out
}

// The gauges read a ConcurrencyLimit's slots taken, its limit and its
// waiters at each collection, and stop once unregistered.
func TestInstrumentConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		limit := &retry.ConcurrencyLimit{Slots: 2}
		reg, err := retryotel.InstrumentConcurrency(limit, retryotel.WithMeterProvider(tl.meters),
			retryotel.WithAttributes(attribute.String("peer.service", "payments")))
		require.NoError(t, err)
		assert.Equal(t, map[string]int64{
			"retry.concurrency.active": 0, "retry.concurrency.limit": 2, "retry.concurrency.pending": 0,
		}, concurrencyGauges(t, tl.collect(t)))

		ctx := t.Context()
		var releases []func(time.Duration, error)
		for range 2 {
			release, err := limit.Acquire(ctx, time.Time{})
			require.NoError(t, err)
			releases = append(releases, release)
		}
		got := make(chan func(time.Duration, error))
		go func() {
			release, _ := limit.Acquire(ctx, time.Time{})
			got <- release
		}()
		synctest.Wait() // the third waits for a slot
		assert.Equal(t, map[string]int64{
			"retry.concurrency.active": 2, "retry.concurrency.limit": 2, "retry.concurrency.pending": 1,
		}, concurrencyGauges(t, tl.collect(t)))

		releases[0](0, nil) // its slot goes to the waiter
		releases[0] = <-got
		assert.Equal(t, map[string]int64{
			"retry.concurrency.active": 2, "retry.concurrency.limit": 2, "retry.concurrency.pending": 0,
		}, concurrencyGauges(t, tl.collect(t)))

		for _, release := range releases {
			release(0, nil)
		}
		assert.Equal(t, map[string]int64{
			"retry.concurrency.active": 0, "retry.concurrency.limit": 2, "retry.concurrency.pending": 0,
		}, concurrencyGauges(t, tl.collect(t)))

		require.NoError(t, reg.Unregister())
		m := tl.collect(t)
		assert.Empty(t, m.ints(t, "retry.concurrency.active"), "no point once unregistered")
	})
}

// learned is a Concurrency that knows only its limit, as one whose slots
// are counted elsewhere might.
type learned struct{ limit int }

func (learned) Acquire(context.Context, time.Time) (func(time.Duration, error), error) {
	return func(time.Duration, error) {}, nil
}
func (l learned) Limit() int { return l.limit }

// bare is a Concurrency with nothing to report.
type bare struct{}

func (bare) Acquire(context.Context, time.Time) (func(time.Duration, error), error) {
	return func(time.Duration, error) {}, nil
}

// Only the methods a Concurrency has are reported; one with none is an
// error, and registers nothing.
func TestInstrumentConcurrencyReadsWhatItHas(t *testing.T) {
	t.Parallel()
	tl := newTelemetry(t)
	_, err := retryotel.InstrumentConcurrency(learned{limit: 7}, retryotel.WithMeterProvider(tl.meters))
	require.NoError(t, err)
	m := tl.collect(t)
	assert.Equal(t, map[string]int64{"": 7}, m.ints(t, "retry.concurrency.limit"))
	assert.NotContains(t, m, "retry.concurrency.active")
	assert.NotContains(t, m, "retry.concurrency.pending")

	reg, err := retryotel.InstrumentConcurrency(bare{}, retryotel.WithMeterProvider(tl.meters))
	require.EqualError(t, err, "retryotel: retryotel_test.bare has no InFlight, Limit or Waiting method to report")
	assert.Nil(t, reg)
}

// The state gauge gives 1 to the state the breaker is in, and every change
// of state is counted with the states it joins; the breaker's own OnChange
// still hears of each.
func TestInstrumentBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		var heard []string
		b := &retry.CircuitBreaker{Failures: 2, OpenFor: 5 * time.Second,
			OnChange: func(from, to string, _ time.Time) { heard = append(heard, from+">"+to) }}
		reg, err := retryotel.InstrumentBreaker(b, retryotel.WithMeterProvider(tl.meters))
		require.NoError(t, err)
		states := func(closed, open, halfOpen int64) map[string]int64 {
			return map[string]int64{
				"retry.breaker.state=closed":    closed,
				"retry.breaker.state=open":      open,
				"retry.breaker.state=half-open": halfOpen,
			}
		}
		m := tl.collect(t)
		assert.Equal(t, states(1, 0, 0), m.ints(t, "retry.breaker.state"))
		assert.Empty(t, m.sums(t, "retry.breaker.transitions"))

		for range 2 {
			done, _ := b.Allow(time.Now())
			require.NotNil(t, done)
			done(time.Now(), errBoom)
		}
		m = tl.collect(t)
		assert.Equal(t, states(0, 1, 0), m.ints(t, "retry.breaker.state"))
		assert.Equal(t, map[string]int64{
			"retry.breaker.previous_state=closed,retry.breaker.state=open": 1,
		}, m.sums(t, "retry.breaker.transitions"))

		// OpenFor over: the gauge's reading turns it half-open, and counts
		// the change in the same collection.
		time.Sleep(5 * time.Second)
		m = tl.collect(t)
		assert.Equal(t, states(0, 0, 1), m.ints(t, "retry.breaker.state"))
		assert.Equal(t, map[string]int64{
			"retry.breaker.previous_state=closed,retry.breaker.state=open":    1,
			"retry.breaker.previous_state=open,retry.breaker.state=half-open": 1,
		}, m.sums(t, "retry.breaker.transitions"))

		done, _ := b.Allow(time.Now()) // the probe, which succeeds
		require.NotNil(t, done)
		done(time.Now(), nil)
		m = tl.collect(t)
		assert.Equal(t, states(1, 0, 0), m.ints(t, "retry.breaker.state"))
		assert.Equal(t, map[string]int64{
			"retry.breaker.previous_state=closed,retry.breaker.state=open":      1,
			"retry.breaker.previous_state=open,retry.breaker.state=half-open":   1,
			"retry.breaker.previous_state=half-open,retry.breaker.state=closed": 1,
		}, m.sums(t, "retry.breaker.transitions"))
		assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, heard)

		require.NoError(t, reg.Unregister())
		assert.Empty(t, tl.collect(t).ints(t, "retry.breaker.state"), "no point once unregistered")
	})
}

// refused is a breaker's refusal, as the core gives one: it Is
// retry.ErrBreakerOpen and says until when.
type refused struct{ until time.Time }

func (refused) Error() string        { return "retry: circuit breaker open" }
func (refused) Is(target error) bool { return target == retry.ErrBreakerOpen }
func (r refused) Until() time.Time   { return r.until }

// A wait for a slot is timed in retry.slot.wait.duration, the first
// attempt's included, and in retry.wait.duration as set by the slot when it
// was a retry's; a call that found no slot, or an open breaker, has a
// result of its own.
func TestSlotWaitsAndBoundsResults(t *testing.T) {
	t.Parallel()
	tl := newTelemetry(t)
	observe := tl.instrument(retry.Policy{}).Observe
	ctx := t.Context()
	// A call that waited 2s for a slot for its first attempt, failed, and
	// waited 3s for one for its retry, which succeeded.
	observe(ctx, retry.Event{Attempt: 1, Err: errReset, Retry: true, Wait: time.Second, Backoff: time.Second,
		Waited: 2 * time.Second, WaitedFor: "slot"})
	observe(ctx, retry.Event{Attempt: 2, Waited: 3 * time.Second, WaitedFor: "slot"})
	observe(ctx, retry.Event{Attempt: 2, Done: true})
	// One that failed, and found no slot for its retry within 4s.
	noSlot := &retry.Error{Attempts: 1, Reason: retry.ErrNoSlot, Last: errReset}
	observe(ctx, retry.Event{Attempt: 1, Err: errReset, Retry: true})
	observe(ctx, retry.Event{Attempt: 1, Done: true, Err: noSlot, Reason: noSlot.Reason,
		Waited: 4 * time.Second, WaitedFor: "slot"})
	// One that failed, and that an open breaker stopped at its retry.
	open := &retry.Error{Attempts: 1, Reason: refused{until: time.Now().Add(time.Minute)}, Last: errReset}
	observe(ctx, retry.Event{Attempt: 1, Err: errReset, Retry: true})
	observe(ctx, retry.Event{Attempt: 1, Done: true, Err: open, Reason: open.Reason})

	m := tl.collect(t)
	assert.Equal(t, map[string]hist{"": {Count: 3, Sum: 9}}, m.histograms(t, "retry.slot.wait.duration"))
	assert.Equal(t, map[string]hist{"retry.wait.set_by=slot": {Count: 2, Sum: 7}}, m.histograms(t, "retry.wait.duration"))
	assert.Equal(t, map[string]int64{
		"retry.result=success_after_retry":                                                  1,
		"error.type=connection_reset,retry.outcome_unknown=false,retry.result=no_slot":      1,
		"error.type=connection_reset,retry.outcome_unknown=false,retry.result=breaker_open": 1,
	}, m.sums(t, "retry.calls"))
}

// Through the core's loop: a call that waits 2s for the one slot records
// that wait, and one that finds the queue of waiters full stops with
// no_slot.
func TestSlotWaitThroughDo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		limit := &retry.ConcurrencyLimit{Slots: 1, Queue: 1}
		policy := tl.instrument(retry.Policy{Concurrency: limit})
		ctx := t.Context()
		release, err := limit.Acquire(ctx, time.Time{})
		require.NoError(t, err)
		waited := make(chan error)
		go func() { waited <- retry.Do(ctx, func(context.Context) error { return nil }, policy) }()
		synctest.Wait() // it waits for the slot; the queue is full
		err = retry.Do(ctx, func(context.Context) error { return nil }, policy)
		require.ErrorIs(t, err, retry.ErrNoSlot)
		time.Sleep(2 * time.Second)
		release(0, nil)
		require.NoError(t, <-waited)

		m := tl.collect(t)
		assert.Equal(t, map[string]hist{"": {Count: 1, Sum: 2}}, m.histograms(t, "retry.slot.wait.duration"))
		// No attempt was made: error.type is the reason's, a sentinel's type.
		assert.Equal(t, map[string]int64{
			"retry.result=success_first_attempt":                                  1,
			"error.type=no_slot,retry.outcome_unknown=false,retry.result=no_slot": 1,
		}, m.sums(t, "retry.calls"))
	})
}
