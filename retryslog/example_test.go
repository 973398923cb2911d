package retryslog_test

import (
	"context"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryslog"
)

// Two calls logged: one that succeeds at its third attempt, after waiting
// 1ns each time (a server asked for 2ns once), and one that runs out of
// attempts. The handler drops the time and the elapsed time so that the
// output can be checked.
func ExampleObserver() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "elapsed" {
				return slog.Attr{}
			}
			return a
		},
	}))
	policy := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Nanosecond), Observe: retryslog.Observer(logger)}

	attempts := 0
	_ = retry.Do(context.Background(), func(context.Context) error {
		switch attempts++; attempts {
		case 1:
			return syscall.ECONNRESET
		case 2:
			return retry.RetryAfter(syscall.ECONNREFUSED, 2*time.Nanosecond)
		}
		return nil
	}, policy)
	_ = retry.Do(context.Background(), func(context.Context) error { return syscall.ECONNRESET }, policy)
	// Output:
	// level=WARN msg="attempt failed, retrying" attempt=1 err="connection reset by peer" wait=1ns wait_set_by=backoff
	// level=WARN msg="attempt failed, retrying" attempt=2 err="connection refused" wait=2ns wait_set_by=server
	// level=INFO msg="call succeeded after retrying" attempts=3
	// level=WARN msg="attempt failed, retrying" attempt=1 err="connection reset by peer" wait=1ns wait_set_by=backoff
	// level=WARN msg="attempt failed, retrying" attempt=2 err="connection reset by peer" wait=1ns wait_set_by=backoff
	// level=WARN msg="attempt failed" attempt=3 err="connection reset by peer"
	// level=ERROR msg="call failed" attempts=3 reason="retry: attempts exhausted" err="retry: gave up after 3 attempts (attempts exhausted): connection reset by peer" outcome_unknown=true
}
