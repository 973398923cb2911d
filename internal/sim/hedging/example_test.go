package hedging_test

import (
	"fmt"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim/hedging"
)

// One call whose first attempt stalls for a second: the hedge, sent 10ms
// after it, answers 5ms later and wins, and the stalled attempt is
// cancelled.
func ExampleRun() {
	r := hedging.Run(hedging.Config{
		Arrivals: []time.Duration{0},
		Policy:   retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)},
		Answer: func(call, attempt int) (time.Duration, error) {
			if attempt == 1 {
				return time.Second, nil
			}
			return 5 * time.Millisecond, nil
		},
	})
	fmt.Println("attempts:", r.Attempts, "hedges:", r.Hedges, "cut:", r.Cut, "latency:", r.Latencies)
	// Output: attempts: 2 hedges: 1 cut: 1 latency: [15ms]
}
