package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
)

// Two processes share one limit of 10 attempts a second with a burst of 2
// through one store (here memStore, a Store in memory; retrypg and
// retryredis provide the real ones): between them, the first two attempts
// start at once and the third a tenth of a second later.
func Example() {
	store := &memStore{}
	a, err := fleet.New(store, 10, 2, nil) // in process A
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := fleet.New(store, 10, 2, nil) // in process B
	if err != nil {
		fmt.Println(err)
		return
	}
	var first time.Time
	for i, lim := range []*fleet.Limiter{a, b, a} {
		err := retry.Do(context.Background(), func(context.Context) error {
			if first.IsZero() {
				first = time.Now()
			}
			// Read as the limiter decided, not to the millisecond: a busy
			// machine wakes a wait late.
			when := "at once"
			if time.Since(first) >= 50*time.Millisecond {
				when = "a tenth of a second later"
			}
			fmt.Println("attempt", i+1, "starts", when)
			return nil
		}, retry.Policy{Limiter: lim})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// attempt 1 starts at once
	// attempt 2 starts at once
	// attempt 3 starts a tenth of a second later
}
