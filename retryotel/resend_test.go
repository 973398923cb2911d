package retryotel_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
	"github.com/seed93a044d1/retry/retryotel"
)

// With retryhttp over otelhttp over ResendCount, each attempt has its own
// client span, and a retry's carries http.request.resend_count; the
// caller's span gets an event per retry. A real loopback server answers
// 503 twice, then 200. Not in a bubble: the network is real, and nothing
// here depends on time.
func TestResendCountOnClientSpans(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	tl := newTelemetry(t)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tl.spans))
	transport := otelhttp.NewTransport(retryotel.ResendCount(srv.Client().Transport), otelhttp.WithTracerProvider(tp))
	client := retryhttp.NewClient(&http.Client{Transport: transport},
		tl.instrument(retry.Policy{Backoff: retry.Constant(0)}))

	ctx, parent := tp.Tracer("test").Start(t.Context(), "fetch")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	parent.End()
	assert.Equal(t, "ok", string(body))
	assert.Equal(t, int32(3), hits.Load())

	var clients []sdktrace.ReadOnlySpan
	var root sdktrace.ReadOnlySpan
	for _, s := range tl.spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindClient:
			clients = append(clients, s)
		case trace.SpanKindInternal:
			root = s
		}
	}
	require.Len(t, clients, 3, "one client span per attempt")
	require.NotNil(t, root)
	for i, s := range clients {
		assert.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "attempt %d's span is the caller's child", i+1)
		count, ok := attr(s.Attributes(), "http.request.resend_count")
		if i == 0 {
			assert.False(t, ok, "the first attempt is no resend")
			continue
		}
		require.True(t, ok, "attempt %d carries http.request.resend_count", i+1)
		assert.Equal(t, int64(i), count.AsInt64(), "attempt %d's resend count", i+1)
	}
	require.Len(t, root.Events(), 2)
	for i, e := range root.Events() {
		n, _ := attr(e.Attributes, "retry.attempt.number")
		et, _ := attr(e.Attributes, "error.type")
		assert.Equal(t, int64(i+1), n.AsInt64())
		assert.Equal(t, "503", et.AsString())
	}

	m := tl.collect(t)
	assert.Equal(t, map[string]int64{
		"error.type=503,retry.attempt.kind=original": 1,
		"error.type=503,retry.attempt.kind=retry":    1,
		"retry.attempt.kind=retry":                   1,
	}, m.sums(t, "retry.attempts"))
	assert.Equal(t, map[string]int64{"retry.result=success_after_retry": 1}, m.sums(t, "retry.calls"))
}

// attr finds the attribute named key.
func attr(attrs []attribute.KeyValue, key attribute.Key) (attribute.Value, bool) {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// idleCounter is a RoundTripper that counts CloseIdleConnections.
type idleCounter struct {
	http.RoundTripper
	closed int
}

func (c *idleCounter) CloseIdleConnections() { c.closed++ }

// ResendCount passes CloseIdleConnections on, and a request that no retry
// loop numbered goes through without the attribute.
func TestResendCountPassesThrough(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	base := &idleCounter{RoundTripper: srv.Client().Transport}
	rt := retryotel.ResendCount(base)

	tl := newTelemetry(t)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tl.spans))
	ctx, span := tp.Tracer("test").Start(t.Context(), "plain")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	span.End()
	_, ok := attr(tl.spans.Ended()[0].Attributes(), "http.request.resend_count")
	assert.False(t, ok)

	rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	assert.Equal(t, 1, base.closed)
	assert.NotNil(t, retryotel.ResendCount(nil), "nil means http.DefaultTransport")
}
