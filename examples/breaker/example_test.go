package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/sony/gobreaker/v2"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/breaker"
)

// A dependency that is down: every request resets the connection. The
// breaker opens after three failures in a row, within the first call; the
// call then stops at once, with the breaker's error as its reason, and the
// next call does not reach the dependency at all.
func Example() {
	reached := 0
	fetch := func(context.Context) (string, error) {
		reached++
		return "", syscall.ECONNRESET
	}
	cb := gobreaker.NewCircuitBreaker[string](breaker.Settings("prices", func(c gobreaker.Counts) bool {
		return c.ConsecutiveFailures >= 3
	}))
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0)} // waits of 0 to run at once; the default starts at 100ms
	call := func(ctx context.Context) (string, error) {
		return retry.DoValue(ctx, func(ctx context.Context) (string, error) {
			return breaker.Attempt(ctx, cb, fetch)
		}, policy)
	}

	for i := 1; i <= 2; i++ {
		reached = 0
		_, err := call(context.Background())
		var re *retry.Error
		errors.As(err, &re)
		fmt.Printf("call %d: %d attempts, %d reached the dependency; reason: %v; breaker open: %v\n",
			i, re.Attempts, reached, re.Reason, errors.Is(err, gobreaker.ErrOpenState))
	}

	// A retry loop around this one, a retrying client say, does not retry
	// the refusal either: it stops after its first attempt, with the same
	// reason.
	outer := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		outer++
		_, err := call(ctx)
		return err
	}, retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)})
	var re *retry.Error
	errors.As(err, &re)
	fmt.Printf("outer loop: %d attempt; reason: %v\n", outer, re.Reason)

	// Without the Open wrapper, the breaker's refusal is an error like any
	// other, and the loop retries it until its attempts run out.
	_, err = retry.DoValue(context.Background(), func(context.Context) (string, error) {
		return cb.Execute(func() (string, error) { return fetch(context.Background()) })
	}, policy)
	errors.As(err, &re)
	fmt.Printf("unwrapped: %d attempts; reason: %v\n", re.Attempts, re.Reason)
	// Output:
	// call 1: 4 attempts, 3 reached the dependency; reason: circuit breaker is open; breaker open: true
	// call 2: 1 attempts, 0 reached the dependency; reason: circuit breaker is open; breaker open: true
	// outer loop: 1 attempt; reason: circuit breaker is open
	// unwrapped: 5 attempts; reason: retry: attempts exhausted
}
