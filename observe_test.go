package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

func TestAttemptFrom(t *testing.T) {
	t.Parallel()
	var seen []int
	err := retry.Do(t.Context(), func(ctx context.Context) error {
		seen = append(seen, retry.AttemptFrom(ctx))
		if len(seen) < 3 {
			return errFlaky
		}
		return nil
	}, retry.Policy{Backoff: retry.Constant(0), AttemptInContext: true})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, seen)
}

func TestAttemptFromWithAttemptTimeout(t *testing.T) {
	t.Parallel()
	var seen []int
	_ = retry.Do(t.Context(), func(ctx context.Context) error {
		// The attempt's own context is made from the numbered one.
		_, ok := ctx.Deadline()
		require.True(t, ok, "the attempt has its timeout")
		seen = append(seen, retry.AttemptFrom(ctx))
		return errFlaky
	}, retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), AttemptInContext: true, AttemptTimeout: time.Hour})
	assert.Equal(t, []int{1, 2}, seen)
}

func TestAttemptFromWithoutNumbering(t *testing.T) {
	t.Parallel()
	var seen []int
	_ = retry.Do(t.Context(), func(ctx context.Context) error {
		seen = append(seen, retry.AttemptFrom(ctx))
		return errFlaky
	}, retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	assert.Equal(t, []int{1, 1}, seen, "without AttemptInContext fn runs on the caller's context")
	assert.Equal(t, 1, retry.AttemptFrom(context.Background()))
	//lint:ignore SA1012 a nil context is documented to give 1
	assert.Equal(t, 1, retry.AttemptFrom(nil))
}

func TestAttemptFromNested(t *testing.T) {
	t.Parallel()
	numbered := retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), AttemptInContext: true}
	type pair struct{ outer, inner int }
	var seen []pair
	_ = retry.Do(t.Context(), func(ctx context.Context) error {
		outer := retry.AttemptFrom(ctx)
		err := retry.Do(ctx, func(ctx context.Context) error {
			seen = append(seen, pair{outer, retry.AttemptFrom(ctx)})
			return errFlaky
		}, numbered)
		return retry.Transient(err) // two layers on purpose
	}, numbered)
	assert.Equal(t, []pair{{1, 1}, {1, 2}, {2, 1}, {2, 2}}, seen, "the innermost numbering loop counts")
}

// A goroutine that fn starts may read the number after fn returned, while
// the loop moves on: run under -race.
func TestAttemptFromReadByAGoroutine(t *testing.T) {
	t.Parallel()
	done := make(chan int, 3)
	_ = retry.Do(t.Context(), func(ctx context.Context) error {
		go func() { done <- retry.AttemptFrom(ctx) }()
		return errFlaky
	}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), AttemptInContext: true})
	for range 3 {
		n := <-done
		assert.True(t, n >= 1 && n <= 3, "AttemptFrom = %d, want 1 to 3", n)
	}
}

func TestObserveAndNumberingAllocations(t *testing.T) {
	ctx := context.Background()
	success := func(context.Context) error { return nil }
	observe := func(context.Context, retry.Event) {}

	allocs := testing.AllocsPerRun(100, func() { _ = retry.Do(ctx, success, retry.Policy{Observe: observe}) })
	assert.Zero(t, allocs, "a first-try success with Observe set")

	allocs = testing.AllocsPerRun(100, func() { _ = retry.Do(ctx, success, retry.Policy{AttemptInContext: true}) })
	assert.Equal(t, 1.0, allocs, "numbering costs one context per call")

	fn, reset := failing(2)
	p := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(0), Observe: observe, AttemptInContext: true}
	allocs = testing.AllocsPerRun(100, func() { reset(); _ = retry.Do(ctx, fn, p) })
	assert.Equal(t, 1.0, allocs, "events cost nothing; numbering one context per call, not per attempt")
}

func BenchmarkDoObserved(b *testing.B) {
	ctx := context.Background()
	observe := func(context.Context, retry.Event) {}
	b.Run("success-observe", func(b *testing.B) {
		fn := func(context.Context) error { return nil }
		p := retry.Policy{Observe: observe}
		b.ReportAllocs()
		for b.Loop() {
			_ = retry.Do(ctx, fn, p)
		}
	})
	b.Run("success-number", func(b *testing.B) {
		fn := func(context.Context) error { return nil }
		p := retry.Policy{AttemptInContext: true}
		b.ReportAllocs()
		for b.Loop() {
			_ = retry.Do(ctx, fn, p)
		}
	})
	b.Run("two-failures-0s-observe", func(b *testing.B) {
		fn, reset := failing(2)
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Observe: observe}
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if err := retry.Do(ctx, fn, p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
