package retry

import (
	"context"
	"time"
)

// fits reports whether an attempt that starts after wait still has at least
// minAttempt of its own strictly before the deadline; a zero deadline means
// none. It works on durations, so a huge wait saturates instead of wrapping.
func fits(now time.Time, wait, minAttempt time.Duration, deadline time.Time) bool {
	if deadline.IsZero() {
		return true
	}
	left := deadline.Sub(now) // saturates
	wait, minAttempt = max(wait, 0), max(minAttempt, 0)
	return wait < left && minAttempt < left-wait
}

// passed reports whether the caller's deadline has come, even if its
// context's timer has not fired yet: when an attempt's timeout and the
// caller's deadline end together, the caller's context wins.
func passed(ctx context.Context, now time.Time) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !now.Before(d)
}

// stopCause returns why the caller's context ended. When its deadline has
// passed but its timer has not fired yet, that is DeadlineExceeded.
func stopCause(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return context.DeadlineExceeded
}

// attemptContext returns the context for one attempt: the caller's, or, with
// a per-attempt timeout, one that ends at min(now+timeout, deadline), where
// deadline is the caller's (zero if none). When the caller's deadline comes
// first, the attempt runs on the caller's context, so fn sees the caller's own
// error and no context is made.
func attemptContext(ctx context.Context, now time.Time, timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	if timeout <= 0 || (!deadline.IsZero() && timeout >= deadline.Sub(now)) {
		return ctx, nil
	}
	return context.WithDeadline(ctx, now.Add(timeout))
}

// epoch anchors monotonicSince: a reading of both clocks, taken once.
var epoch = time.Now()

// monotonicSince reads the monotonic clock alone, as the time since
// epoch: one clock read where time.Now makes two, about 60% of its cost.
// A later time.Now's Sub(epoch) is on the same clock. (Inside a
// testing/synctest bubble both are the bubble's clock, as wall clock
// readings, which Sub also keeps exact.)
func monotonicSince() time.Duration {
	return time.Since(epoch)
}
