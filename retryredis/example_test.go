package retryredis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryredis"
)

// Every process that makes a limiter of the same name on the same Redis
// shares its rate: here two limiters (as two processes would), 10 attempts
// a second with a burst of 2 between them. (The example runs on miniredis,
// a Redis in memory, so that it needs no server.)
func ExampleNewLimiter() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	inA, err := retryredis.NewLimiter(rdb, "provider", 10, 2, nil) // in process A
	if err != nil {
		panic(err)
	}
	inB, err := retryredis.NewLimiter(rdb, "provider", 10, 2, nil) // in process B
	if err != nil {
		panic(err)
	}
	var first time.Time
	for i, lim := range []retry.Limiter{inA, inB, inA} {
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
