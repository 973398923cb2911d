package retryslog_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryslog"
)

// textLogger logs every level as text without the time, into a buffer.
func textLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "elapsed" {
				return slog.Attr{}
			}
			return a
		},
	})), &buf
}

func TestObserverFirstTrySuccessIsDebug(t *testing.T) {
	t.Parallel()
	logger, buf := textLogger()
	err := retry.Do(t.Context(), func(context.Context) error { return nil },
		retry.Policy{Observe: retryslog.Observer(logger)})
	require.NoError(t, err)
	assert.Equal(t, "level=DEBUG msg=\"call succeeded\" attempts=1\n", buf.String())
}

func TestObserverNotRetried(t *testing.T) {
	t.Parallel()
	logger, buf := textLogger()
	errBad := errors.New("bad request")
	err := retry.Do(t.Context(), func(context.Context) error { return retry.Permanent(errBad) },
		retry.Policy{Observe: retryslog.Observer(logger)})
	require.ErrorIs(t, err, errBad)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	assert.Equal(t, `level=WARN msg="attempt failed" attempt=1 err="bad request"`, lines[0])
	assert.Contains(t, lines[1], `level=ERROR msg="call failed" attempts=1 reason="`+retry.ErrNotRetryable.Error()+`"`)
	assert.Contains(t, lines[1], "outcome_unknown=false")
}

// The context that Do was given reaches the handler.
func TestObserverPassesTheCallersContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	var seen []any
	h := ctxHandler{key: key{}, seen: &seen}
	ctx := context.WithValue(t.Context(), key{}, "request-7")
	_ = retry.Do(ctx, func(context.Context) error { return syscall.ECONNRESET },
		retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), Observe: retryslog.Observer(slog.New(h))})
	assert.Equal(t, []any{"request-7", "request-7", "request-7"}, seen, "two attempts and the end")
}

type ctxHandler struct {
	key  any
	seen *[]any
}

func (h ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h ctxHandler) Handle(ctx context.Context, _ slog.Record) error {
	*h.seen = append(*h.seen, ctx.Value(h.key))
	return nil
}
func (h ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h ctxHandler) WithGroup(string) slog.Handler      { return h }

// A hedge that loses is cancelled: logged at Debug, marked as a hedge.
func TestObserverHedgedLoser(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logger, buf := textLogger()
		policy := retry.Policy{MaxAttempts: 2, HedgeDelay: retry.Constant(time.Millisecond), AttemptInContext: true,
			Observe: retryslog.Observer(logger)}
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			if retry.AttemptFrom(ctx) == 1 {
				time.Sleep(5 * time.Millisecond) // slow, but it answers first
				return nil
			}
			<-ctx.Done() // the hedge never answers
			return ctx.Err()
		}, policy)
		require.NoError(t, err)
		assert.Contains(t, buf.String(), `level=DEBUG msg="attempt cancelled" attempt=2 err="context canceled" hedge=true`)
		assert.Contains(t, buf.String(), `level=INFO msg="call succeeded after retrying" attempts=2`)
	})
}

// A nil logger is slog.Default at the time of each event.
func TestObserverNilLoggerIsTheDefault(t *testing.T) {
	logger, buf := textLogger()
	old := slog.Default()
	slog.SetDefault(logger)
	defer slog.SetDefault(old)
	_ = retry.Do(t.Context(), func(context.Context) error { return nil }, retry.Policy{Observe: retryslog.Observer(nil)})
	assert.Equal(t, "level=DEBUG msg=\"call succeeded\" attempts=1\n", buf.String())
}
