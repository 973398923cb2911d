package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// One Limiter for every call to a provider, with no rate configured: it
// books at once until the provider throttles, and paces after.
func ExampleLimiter() {
	lim := &adaptive.Limiter{}
	policy := retry.Policy{Limiter: lim, Budget: retry.NewBudget(0.1, 1), Backoff: retry.Constant(time.Nanosecond)}

	fmt.Println("pacing before:", lim.Rate() > 0)
	calls := 0
	err := retry.Do(context.Background(), func(context.Context) error {
		calls++
		if calls == 1 {
			return &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests"}
		}
		return nil
	}, policy)
	fmt.Println(err, calls)
	fmt.Println("pacing after:", lim.Rate() > 0)
	// Output:
	// pacing before: false
	// <nil> 2
	// pacing after: true
}

// A simulation drives the Limiter in virtual time: ReserveAt and LearnAt
// take the time instead of reading the clock.
func ExampleLimiter_ReserveAt() {
	lim := &adaptive.Limiter{}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	// Two seconds of 100 attempts a second, each answered with a success
	// 5ms after it starts.
	for range 200 {
		r := lim.ReserveAt(now, now)
		lim.LearnAt(r.Start.Add(5*time.Millisecond), 5*time.Millisecond, nil)
		now = now.Add(10 * time.Millisecond)
	}
	fmt.Printf("%v: %.0f/s\n", now.Sub(start), lim.Rate())

	// The provider refuses one: the rate is cut to 0.85 of the 100/s it
	// accepted, and bookings are paced one slot apart.
	lim.LearnAt(now, 5*time.Millisecond, &retry.ResponseError{StatusCode: 429, RetryAfter: time.Second})
	fmt.Printf("%v: %.0f/s\n", now.Sub(start), lim.Rate())
	a, b := lim.ReserveAt(now, now), lim.ReserveAt(now, now)
	fmt.Println("slot:", b.Start.Sub(a.Start).Round(time.Millisecond))

	// A retry planned for the server's delay starts then, not a slot later.
	r := lim.ReserveAt(now, now.Add(time.Second))
	fmt.Println("retry:", r.Start.Sub(now))
	// Output:
	// 2s: 0/s
	// 2s: 85/s
	// slot: 12ms
	// retry: 1s
}

// One Hedge for every call to a dependency: the delay before a hedge is the
// p95 of the recent successes, from the floor until 200 have been seen.
func ExampleHedge() {
	hedge := &adaptive.Hedge{Floor: time.Millisecond}
	fmt.Println(hedge.Delay(1, 0, 0))
	// 1000 successes, 1ms to 20ms.
	for i := range 1000 {
		hedge.Learn(time.Duration(1+i%20)*time.Millisecond, nil)
	}
	fmt.Println(hedge.Delay(1, 0, 0).Round(time.Millisecond))

	policy := retry.Policy{HedgeDelay: hedge, Budget: retry.NewBudget(0.05, 1)}
	err := retry.Do(context.Background(), func(context.Context) error { return nil }, policy)
	fmt.Println(err)
	// Output:
	// 1ms
	// 19ms
	// <nil>
}

// One Concurrency for every call to a dependency, with no limit configured:
// it starts at 20 slots and learns the limit from the attempts' latencies
// and throttling answers. The loop takes a slot for each attempt and gives
// it back as the attempt ends; here a slot is taken and given back by hand,
// as the loop does.
func ExampleConcurrency() {
	slots := &adaptive.Concurrency{}
	policy := retry.Policy{Concurrency: slots, Budget: retry.NewBudget(0.1, 1)}
	err := retry.Do(context.Background(), func(context.Context) error { return nil }, policy)
	fmt.Println(err)

	release, err := slots.Acquire(context.Background(), time.Time{})
	fmt.Println(err, slots.InFlight(), "of", slots.Limit())
	release(5*time.Millisecond, nil) // how long the attempt ran, and its error
	fmt.Println(slots.InFlight(), "of", slots.Limit())
	// Output:
	// <nil>
	// <nil> 1 of 20
	// 0 of 20
}
