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
	for _, lim := range []*fleet.Limiter{a, b, a} {
		err := retry.Do(context.Background(), func(context.Context) error {
			if first.IsZero() {
				first = time.Now()
			}
			fmt.Println("attempt at +", time.Since(first).Round(50*time.Millisecond))
			return nil
		}, retry.Policy{Limiter: lim})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// attempt at + 0s
	// attempt at + 0s
	// attempt at + 100ms
}
