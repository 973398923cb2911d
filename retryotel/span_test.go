package retryotel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seed93a044d1/retry"
)

// Each retry adds an event to the span in the call's context, with the
// attempt that failed, the wait, what set it and the error's type.
func TestSpanEventPerRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{Backoff: retry.Constant(time.Second)})
		ctx, span := tl.tracer.Start(t.Context(), "charge")
		calls := 0
		err := retry.Do(ctx, func(context.Context) error {
			switch calls++; calls {
			case 1:
				return errReset
			case 2:
				return retry.RetryAfter(&retry.ResponseError{StatusCode: 503}, 3*time.Second)
			}
			return nil
		}, policy)
		require.NoError(t, err)
		span.End()

		ended := tl.spans.Ended()
		require.Len(t, ended, 1)
		events := ended[0].Events()
		require.Len(t, events, 2)
		start := ended[0].StartTime()
		want := []struct {
			at    time.Duration
			attrs []attribute.KeyValue
		}{
			{0, []attribute.KeyValue{
				attribute.Int("retry.attempt.number", 1),
				attribute.Float64("retry.wait.duration", 1),
				attribute.String("retry.wait.set_by", "backoff"),
				attribute.String("error.type", "connection_reset"),
			}},
			{time.Second, []attribute.KeyValue{
				attribute.Int("retry.attempt.number", 2),
				attribute.Float64("retry.wait.duration", 3),
				attribute.String("retry.wait.set_by", "server"),
				attribute.String("error.type", "503"),
			}},
		}
		for i, w := range want {
			assert.Equal(t, "retry", events[i].Name)
			assert.Equal(t, w.at, events[i].Time.Sub(start), "event %d's time", i)
			assert.Equal(t, w.attrs, events[i].Attributes, "event %d's attributes", i)
		}
	})
}

// A call that succeeds at once, or stops without retrying, adds no event;
// and a span that is not recording gets none.
func TestNoSpanEventWithoutRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tl := newTelemetry(t)
		policy := tl.instrument(retry.Policy{MaxAttempts: 1})
		ctx, span := tl.tracer.Start(t.Context(), "once")
		require.NoError(t, retry.Do(ctx, failing(0, nil), policy))
		require.Error(t, retry.Do(ctx, always(errReset), policy))
		span.End()

		// A sampled-out span: a real SDK span that records nothing.
		unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()),
			sdktrace.WithSpanProcessor(tl.spans))
		ctx, quiet := unsampled.Tracer("test").Start(t.Context(), "quiet")
		require.False(t, quiet.IsRecording())
		policy = tl.instrument(retry.Policy{Backoff: retry.Constant(0)})
		require.NoError(t, retry.Do(ctx, failing(1, errReset), policy))
		quiet.End()
		// With no span at all, the retry is still counted.
		require.NoError(t, retry.Do(t.Context(), failing(1, errReset), policy))

		ended := tl.spans.Ended()
		require.Len(t, ended, 1, "the sampled-out span is not recorded")
		assert.Empty(t, ended[0].Events())
		assert.Equal(t, int64(2), tl.collect(t).sums(t, "retry.attempts")["retry.attempt.kind=retry"])
	})
}
