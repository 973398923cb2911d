package retryotel_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// stall is an attempt that answers only when it is cut.
const stall = -1

// attempts returns a function whose attempt n takes took[n-1] and then
// fails with errs[n-1] (nil: succeeds); one that takes stall blocks until
// its context ends. Attempts past the lists succeed at once. It reads the
// attempt's number from its context: the policy must set AttemptInContext.
func attempts(took []time.Duration, errs []error) func(context.Context) error {
	return func(ctx context.Context) error {
		n := retry.AttemptFrom(ctx) - 1
		if n < len(took) {
			if took[n] == stall {
				<-ctx.Done()
				return ctx.Err()
			}
			time.Sleep(took[n])
		}
		if n < len(errs) {
			return errs[n]
		}
		return nil
	}
}

// Each attempt of a hedged call is counted with its attempt type, as gRFC
// A96 names them: the first is "original", one started after a failure with
// nothing in flight is "retry", and one started beside an attempt in flight
// is "hedge". A hedge waits for no retry's wait, so retry.wait.duration
// records only the retries' waits.
func TestHedgedAttemptTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fn   func(context.Context) error
		want map[string]int64 // retry.attempts
		wait map[string]hist  // retry.wait.duration
	}{
		{
			name: "a hedge wins",
			fn:   attempts([]time.Duration{stall}, nil),
			want: map[string]int64{
				"error.type=canceled,retry.attempt.kind=original": 1, // cut when the hedge won
				"retry.attempt.kind=hedge":                        1,
			},
		},
		{
			name: "the original wins, the hedge is cut",
			fn:   attempts([]time.Duration{150 * time.Millisecond, stall}, nil),
			want: map[string]int64{
				"retry.attempt.kind=original":                  1,
				"error.type=canceled,retry.attempt.kind=hedge": 1,
			},
		},
		{
			name: "a retry, then a hedge beside it wins",
			fn:   attempts([]time.Duration{0, stall}, []error{errReset}),
			want: map[string]int64{
				"error.type=connection_reset,retry.attempt.kind=original": 1,
				"error.type=canceled,retry.attempt.kind=retry":            1,
				"retry.attempt.kind=hedge":                                1,
			},
			wait: map[string]hist{"retry.wait.set_by=backoff": {Count: 1, Sum: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tl := newTelemetry(t)
				policy := tl.instrument(retry.Policy{
					MaxAttempts:      4,
					Backoff:          retry.Constant(time.Second),
					HedgeDelay:       retry.Constant(100 * time.Millisecond),
					AttemptInContext: true,
				})
				require.NoError(t, retry.Do(t.Context(), tt.fn, policy))

				m := tl.collect(t)
				assert.Equal(t, tt.want, m.sums(t, "retry.attempts"))
				if tt.wait == nil {
					assert.NotContains(t, m, "retry.wait.duration", "no retry, no wait")
				} else {
					assert.Equal(t, tt.wait, m.histograms(t, "retry.wait.duration"))
				}
				var calls int64
				for _, n := range m.sums(t, "retry.calls") {
					calls += n
				}
				assert.Equal(t, int64(1), calls)
			})
		})
	}
}

// The extra load that hedging puts on a dependency reads from
// retry.attempts alone: the hedges over the originals (one per call that
// made an attempt). Of 10 calls, 3 answer late and are hedged.
func TestHedgingLoadFromTheMetrics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{HedgeDelay: retry.Constant(100 * time.Millisecond), AttemptInContext: true})
		for i := range 10 {
			fn := attempts(nil, nil)
			if i%3 == 0 && i > 0 {
				fn = attempts([]time.Duration{stall}, nil)
			}
			require.NoError(t, retry.Do(t.Context(), fn, policy))
		}
		counted := tl.collect(t).sums(t, "retry.attempts")
		var byKind [3]int64
		for k, n := range counted {
			switch {
			case strings.Contains(k, "retry.attempt.kind=original"):
				byKind[0] += n
			case strings.Contains(k, "retry.attempt.kind=retry"):
				byKind[1] += n
			case strings.Contains(k, "retry.attempt.kind=hedge"):
				byKind[2] += n
			}
		}
		assert.Equal(t, [3]int64{10, 0, 3}, byKind, "original, retry, hedge")
		assert.InDelta(t, 0.3, float64(byKind[2])/float64(byKind[0]), 1e-9, "hedges per call")
		assert.Equal(t, int64(3), counted["retry.attempt.kind=hedge"], "every hedge won its call")
	})
}

// A call that a hedge won is counted as such: retry.result is
// "success_after_hedge", while a hedged call that its original won, or one
// a retry won, keeps its result.
func TestCallWonByHedge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{
			Backoff:          retry.Constant(0),
			HedgeDelay:       retry.Constant(100 * time.Millisecond),
			AttemptInContext: true,
		})
		for _, fn := range []func(context.Context) error{
			attempts([]time.Duration{stall}, nil),                         // the hedge wins
			attempts([]time.Duration{150 * time.Millisecond, stall}, nil), // the original wins
			attempts(nil, []error{errReset}),                              // a retry wins, no hedge
			attempts(nil, nil),                                            // the original, at once
		} {
			require.NoError(t, retry.Do(t.Context(), fn, policy))
		}
		assert.Equal(t, map[string]int64{
			"retry.result=success_after_hedge":   1,
			"retry.result=success_after_retry":   2,
			"retry.result=success_first_attempt": 1,
		}, tl.collect(t).sums(t, "retry.calls"))
	})
}
