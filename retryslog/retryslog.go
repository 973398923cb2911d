// Package retryslog logs the attempts and the outcome of retried calls with
// log/slog, through [retry.Policy].Observe:
//
//	policy.Observe = retryslog.Observer(logger)
//
// Observe runs on the goroutine that called retry.Do (for a hedged call, on
// the goroutine that ran the attempt), with the caller's context, so each
// line goes through the handler with that context: a handler that adds the
// request's trace ID, or the logger a middleware put there, sees the retries
// of that request. What is logged, at which level, and with which
// attributes is in [Observer]'s documentation; the messages and attribute
// names are part of the API, so that alerts and queries built on them keep
// working across minor releases.
package retryslog

import (
	"context"
	"errors"
	"log/slog"

	"github.com/seed93a044d1/retry"
)

// Observer returns a [retry.Policy] Observe function that logs to logger
// (nil means [slog.Default] at the time of each event):
//
//   - a failed attempt that will be retried: Warn, "attempt failed,
//     retrying", with attempt, err, wait (the time until the next attempt)
//     and wait_set_by ("backoff", "server" or "limiter");
//   - a failed attempt that is not retried: Warn, "attempt failed", with
//     attempt and err;
//   - an attempt cancelled (a hedged call's loser, cut when another attempt
//     won, or an attempt of a call whose context was cancelled): Debug,
//     "attempt cancelled", with attempt and err;
//   - the end of a call that failed: Error, "call failed", with attempts,
//     reason (why it stopped: retry.ErrExhausted and the others), err (the
//     call's *retry.Error) and outcome_unknown (whether the work may have
//     been done all the same);
//   - the end of a call that succeeded after retrying: Info, "call
//     succeeded after retrying", with attempts and elapsed;
//   - the end of a call that succeeded at its first attempt: Debug, "call
//     succeeded", with attempts, since a line per healthy call at Info
//     would be noise.
//
// An attempt that started as a hedge (see Policy.HedgeDelay) has hedge=true as
// well. The function is safe for concurrent use, as a logger is: one
// Observer serves every call of a policy.
func Observer(logger *slog.Logger) func(context.Context, retry.Event) {
	return func(ctx context.Context, e retry.Event) {
		l := logger
		if l == nil {
			l = slog.Default()
		}
		switch {
		case e.Done && e.Err == nil && e.Attempt <= 1:
			l.LogAttrs(ctx, slog.LevelDebug, "call succeeded", slog.Int("attempts", e.Attempt))
		case e.Done && e.Err == nil:
			l.LogAttrs(ctx, slog.LevelInfo, "call succeeded after retrying",
				slog.Int("attempts", e.Attempt), slog.Duration("elapsed", e.Elapsed))
		case e.Done:
			l.LogAttrs(ctx, slog.LevelError, "call failed",
				slog.Int("attempts", e.Attempt), slog.Any("reason", e.Reason), slog.Any("err", e.Err),
				slog.Bool("outcome_unknown", e.OutcomeUnknown))
		case e.Retry:
			attrs := []slog.Attr{slog.Int("attempt", e.Attempt), slog.Any("err", e.Err),
				slog.Duration("wait", e.Wait), slog.String("wait_set_by", e.WaitSetBy())}
			l.LogAttrs(ctx, slog.LevelWarn, "attempt failed, retrying", hedged(attrs, e)...)
		case errors.Is(e.Err, context.Canceled):
			attrs := []slog.Attr{slog.Int("attempt", e.Attempt), slog.Any("err", e.Err)}
			l.LogAttrs(ctx, slog.LevelDebug, "attempt cancelled", hedged(attrs, e)...)
		case e.Err != nil:
			attrs := []slog.Attr{slog.Int("attempt", e.Attempt), slog.Any("err", e.Err)}
			l.LogAttrs(ctx, slog.LevelWarn, "attempt failed", hedged(attrs, e)...)
		}
	}
}

// hedged adds hedge=true to the attributes of a hedge's event.
func hedged(attrs []slog.Attr, e retry.Event) []slog.Attr {
	if e.Hedge {
		return append(attrs, slog.Bool("hedge", true))
	}
	return attrs
}
