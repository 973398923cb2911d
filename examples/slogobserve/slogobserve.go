// Package slogobserve logs every attempt of a retried call with log/slog,
// through retry.Policy.Observe.
//
// Observe runs on the goroutine that called retry.Do, with the caller's
// context, so each line goes through the handler with that context: a
// handler that adds the request's trace ID, or the logger a middleware put
// there, sees the retries of that request. It sees each attempt as it ends,
// once the loop has decided what follows (a retry after a wait, or the
// end), and then the end of the call.
package slogobserve

import (
	"context"
	"log/slog"

	"github.com/seed93a044d1/retry"
)

// Observer returns a Policy.Observe that logs to logger: a warning for each
// failed attempt (with the wait before the next one and what set it, when
// one follows), and one line at the end of the call, at level Info when it
// succeeded after retrying, Error when it failed. A call that succeeds at its
// first attempt logs at Debug: a log line per healthy call is noise.
func Observer(logger *slog.Logger) func(context.Context, retry.Event) {
	return func(ctx context.Context, e retry.Event) {
		switch {
		case e.Done && e.Err == nil && e.Attempt <= 1:
			logger.LogAttrs(ctx, slog.LevelDebug, "call succeeded", slog.Int("attempts", e.Attempt))
		case e.Done && e.Err == nil:
			logger.LogAttrs(ctx, slog.LevelInfo, "call succeeded after retrying",
				slog.Int("attempts", e.Attempt), slog.Duration("elapsed", e.Elapsed))
		case e.Done:
			logger.LogAttrs(ctx, slog.LevelError, "call failed",
				slog.Int("attempts", e.Attempt), slog.Any("reason", e.Reason), slog.Any("err", e.Err),
				slog.Bool("outcome_unknown", e.OutcomeUnknown))
		case e.Retry:
			logger.LogAttrs(ctx, slog.LevelWarn, "attempt failed, retrying",
				slog.Int("attempt", e.Attempt), slog.Any("err", e.Err),
				slog.Duration("wait", e.Wait), slog.String("wait_set_by", e.WaitSetBy()))
		case e.Err != nil:
			logger.LogAttrs(ctx, slog.LevelWarn, "attempt failed", slog.Int("attempt", e.Attempt), slog.Any("err", e.Err))
		}
	}
}
