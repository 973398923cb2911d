package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/breaker"
)

// A dependency that answers "not found" for a while, then is down: every
// request resets the connection. The answers the classifier stops on say
// nothing of its health and leave the breaker closed; the resets open it
// after three failures in a row, within one call, which then stops at once
// rather than spend its last attempts; the next call does not reach the
// dependency at all, and a retry loop around the call stops too.
func Example() {
	errNotFound := retry.Permanent(errors.New("not found"))
	reached := 0
	var answer error
	fetch := func(context.Context) error { reached++; return answer }

	b := breaker.New(gobreaker.Settings{
		Name:        "prices",
		Timeout:     time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
	})
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Breaker: b} // waits of 0 to run at once
	call := func(ctx context.Context) error { return retry.Do(ctx, fetch, policy) }

	answer = errNotFound
	for range 5 {
		_ = call(context.Background())
	}
	fmt.Printf("after 5 not found: %d reached, breaker %v, %d failures counted\n",
		reached, b.State(), b.Counts().TotalFailures)

	answer = syscall.ECONNRESET
	for i := 1; i <= 2; i++ {
		reached = 0
		err := call(context.Background())
		var re *retry.Error
		errors.As(err, &re)
		var open interface{ Until() time.Time }
		errors.As(re.Reason, &open)
		fmt.Printf("call %d: %d attempts, %d reached; breaker open: %v, half-open in %v\n",
			i, re.Attempts, reached, errors.Is(err, retry.ErrBreakerOpen), time.Until(open.Until()).Round(time.Minute))
	}

	outer := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		outer++
		return call(ctx)
	}, retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)})
	fmt.Printf("outer loop: %d attempt; breaker open: %v\n", outer, errors.Is(err, retry.ErrBreakerOpen))
	// Output:
	// after 5 not found: 5 reached, breaker closed, 0 failures counted
	// call 1: 3 attempts, 3 reached; breaker open: true, half-open in 1m0s
	// call 2: 0 attempts, 0 reached; breaker open: true, half-open in 1m0s
	// outer loop: 1 attempt; breaker open: true
}
