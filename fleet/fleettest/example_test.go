package fleettest_test

import (
	"fmt"
	"time"

	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// A Result counts what the provider saw: here four attempts, three of them
// within one second.
func ExampleResult_MostWithin() {
	r := fleettest.Result{
		Drill:  fleettest.Drill{Duration: 2 * time.Second, Rate: 2},
		Starts: []time.Duration{0, 400 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond},
	}
	fmt.Println(r.MostWithin(time.Second), r.Between(time.Second, 2*time.Second), r.PerSecond())
	// Output: 3 1 [3 1]
}
