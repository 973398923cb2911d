package retryotel

import (
	"net/http"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed93a044d1/retry"
)

// ResendCount returns an [http.RoundTripper] that sends each request through
// base (nil means http.DefaultTransport) and, when the request is a retry
// sent by retryhttp, first sets http.request.resend_count (the attempt's
// number less one) on the span in the request's context, as the HTTP
// semantic conventions ask of a client span. otelhttp v0.72.0 does not set
// that attribute itself; put ResendCount below it, where the request's
// context holds otelhttp's client span:
//
//	transport := otelhttp.NewTransport(retryotel.ResendCount(http.DefaultTransport))
//	client := retryhttp.NewClient(&http.Client{Transport: transport}, policy)
//
// The first attempt, and any request that no retry loop numbered, is sent
// without the attribute, as the conventions ask. The count is retryhttp's:
// a redirect, which http.Client follows above retryhttp with a new request,
// starts from the first attempt again. The returned RoundTripper is safe for
// concurrent use as far as base is, and passes CloseIdleConnections on to
// it.
func ResendCount(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return resendCount{base: base}
}

type resendCount struct {
	base http.RoundTripper
}

func (t resendCount) RoundTrip(req *http.Request) (*http.Response, error) {
	if req != nil {
		if n := retry.AttemptFrom(req.Context()); n > 1 {
			trace.SpanFromContext(req.Context()).SetAttributes(semconv.HTTPRequestResendCount(n - 1))
		}
	}
	return t.base.RoundTrip(req)
}

func (t resendCount) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
