package sim_test

import (
	"fmt"
	"time"

	"github.com/seed93a044d1/retry/internal/sim"
)

// A rate per second is a count per clock second: the drill's tables and
// charts both use PerSecond, so their peaks are the same number.
func ExamplePerSecond() {
	attempts := []time.Duration{0, 300 * time.Millisecond, 999 * time.Millisecond, 1500 * time.Millisecond}
	fmt.Println(sim.PerSecond(attempts, 3*time.Second))
	fmt.Println(sim.PeakPerSecond(attempts))
	// Output:
	// [3 1 0]
	// 3
}

// Events come out in time order, and those due at the same time in the
// order they were scheduled.
func ExampleQueue() {
	var q sim.Queue[string]
	q.Schedule(20*time.Millisecond, "write")
	q.Schedule(10*time.Millisecond, "read")
	q.Schedule(20*time.Millisecond, "second write")
	for ev, ok := q.Pop(); ok; ev, ok = q.Pop() {
		fmt.Println(q.Now(), ev)
	}
	// Output:
	// 10ms read
	// 20ms write
	// 20ms second write
}
