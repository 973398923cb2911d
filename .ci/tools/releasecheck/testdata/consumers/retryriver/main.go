// Command retryriver uses retryriver as a user installs it: the middleware
// configures a River client, and a job that failed its first attempt is
// scheduled by the policy's backoff.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

func main() {
	m := retryriver.New(retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Minute)})
	cfg := m.Config(&river.Config{})
	if cfg.MaxAttempts != 5 || cfg.RetryPolicy == nil || len(cfg.Middleware) != 1 {
		fail("Config: MaxAttempts %d, RetryPolicy %v, %d middleware; want 5, the middleware, 1", cfg.MaxAttempts, cfg.RetryPolicy, len(cfg.Middleware))
	}
	now := time.Now()
	next := m.NextRetry(&rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: 5, AttemptedAt: &now})
	if wait := next.Sub(now); wait < 59*time.Second || wait > 61*time.Second {
		fail("NextRetry: in %v, want a minute", wait)
	}
	fmt.Println("River config: 5 attempts; a failed job is scheduled a minute later")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
