package benchmarks

import (
	"context"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
)

// libFailsafe is github.com/failsafe-go/failsafe-go. Its RetryPolicy and
// Executor are safe to share, so they are built once; each call binds its
// context with WithContext, and wraps fn in a closure that carries ctx, since
// Run's fn takes none. Its jitter is a factor: +-50% of the wait. It offers
// no way to compute a delay outside an execution.
var libFailsafe = lib{
	name: "failsafe",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		builder := retrypolicy.NewBuilder[any]().
			WithMaxAttempts(attempts).
			WithBackoff(s.base, maxWait)
		if s.jitter {
			builder = builder.WithJitterFactor(0.5)
		}
		executor := failsafe.With(builder.Build())
		return func(ctx context.Context) error {
			return executor.WithContext(ctx).Run(func() error { return fn(ctx) })
		}
	},
}
