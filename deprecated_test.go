package retry_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// TestDeprecatedNamesStillWork keeps the former names working until they go:
// code written against them compiles and behaves as with the new names.
func TestDeprecatedNamesStillWork(t *testing.T) {
	t.Parallel()
	t.Run("Unknown is Undecided", func(t *testing.T) {
		assert.Equal(t, retry.Undecided, retry.Unknown)
		p := retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0),
			Classifier: func(error) retry.Decision { return retry.Unknown }}
		var calls int
		err := retry.Do(t.Context(), func(context.Context) error { calls++; return errFlaky }, p)
		require.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 2, calls, "Unknown retries, as Undecided does")
	})
	for _, tt := range []struct {
		name   string
		policy retry.Policy
	}{
		{"Hedge", retry.Policy{Hedge: retry.Constant(5 * time.Millisecond)}},
		{"HedgeDelay", retry.Policy{HedgeDelay: retry.Constant(5 * time.Millisecond)}},
		{"HedgeDelay over Hedge", retry.Policy{HedgeDelay: retry.Constant(5 * time.Millisecond), Hedge: retry.Constant(time.Hour)}},
	} {
		t.Run(tt.name+" hedges", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var attempts atomic.Int32
				start := time.Now()
				var hedgedAt time.Duration
				err := retry.Do(t.Context(), func(ctx context.Context) error {
					if attempts.Add(1) == 1 {
						<-ctx.Done() // the first attempt hangs until the hedge wins
						return ctx.Err()
					}
					hedgedAt = time.Since(start)
					return nil
				}, tt.policy)
				require.NoError(t, err)
				assert.Equal(t, int32(2), attempts.Load())
				assert.Equal(t, 5*time.Millisecond, hedgedAt, "the hedge starts after the delay")
			})
		})
	}
	for _, tt := range []struct {
		name   string
		policy retry.Policy
	}{
		{"NumberAttempts", retry.Policy{NumberAttempts: true, Backoff: retry.Constant(0)}},
		{"AttemptInContext", retry.Policy{AttemptInContext: true, Backoff: retry.Constant(0)}},
	} {
		t.Run(tt.name+" numbers attempts", func(t *testing.T) {
			var seen []int
			err := retry.Do(t.Context(), func(ctx context.Context) error {
				seen = append(seen, retry.AttemptFrom(ctx))
				if len(seen) < 3 {
					return errFlaky
				}
				return nil
			}, tt.policy)
			require.NoError(t, err)
			assert.Equal(t, []int{1, 2, 3}, seen)
		})
	}
}
