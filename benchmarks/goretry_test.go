package benchmarks

import (
	"context"
	"testing"
	"time"

	goretry "github.com/sethvargo/go-retry"
)

// libGoRetry is github.com/sethvargo/go-retry. Its backoff counts attempts
// inside, so each call builds its own chain; fn must mark an error retryable,
// which the adapter made once in bind does.
var libGoRetry = lib{
	name: "sethvargo",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		marked := func(ctx context.Context) error {
			return goretry.RetryableError(fn(ctx)) // nil stays nil
		}
		return func(ctx context.Context) error {
			return goretry.Do(ctx, goretryBackoff(s), marked)
		}
	},
	delay: func(b *testing.B) {
		// It cannot be reset: its attempt counter climbs until the shift
		// overflows, then every delay is the cap. That path skips a
		// compare-and-swap, so this slightly flatters it.
		bo := goretry.WithFullJitter(goretry.WithCappedDuration(maxWait, goretry.NewExponential(100*time.Millisecond)))
		b.ReportAllocs()
		for b.Loop() {
			sinkDuration, _ = bo.Next()
		}
	},
}

func goretryBackoff(s schedule) goretry.Backoff {
	bo := goretry.WithCappedDuration(maxWait, goretry.NewExponential(s.base))
	if s.jitter {
		bo = goretry.WithFullJitter(bo)
	}
	return goretry.WithMaxRetries(attempts-1, bo)
}
