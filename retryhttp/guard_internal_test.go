package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// When the attempt's timer has fired by the time Base returns, the attempt
// counts as timed out, whatever Base returned, unless it is an error of
// its own: a response's body is being cut by the cancellation, and a bare
// context.Canceled would read as the caller's cancellation.
func TestSettleAfterTimerFired(t *testing.T) {
	t.Parallel()
	errOther := errors.New("connection refused")
	tests := []struct {
		name     string
		response bool
		err      error
		want     error
	}{
		{name: "response as the timer fires", response: true, want: errAttemptTimeout},
		{name: "bare cancellation", err: context.Canceled, want: errAttemptTimeout},
		{name: "the guard's cause", err: errAttemptTimeout, want: errAttemptTimeout},
		{name: "an error of Base's own", err: errOther, want: errOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				g := newGuard(t.Context(), time.Second)
				time.Sleep(time.Second)
				synctest.Wait() // the timer's func has run

				var resp *http.Response
				body := &closeRecorder{}
				if tt.response {
					resp = &http.Response{StatusCode: http.StatusOK, Body: body}
				}
				got, err := g.settle(resp, tt.err)
				assert.Nil(t, got)
				assert.Equal(t, tt.want, err)
				assert.Equal(t, tt.response, body.closed, "response body closed")
				assert.ErrorIs(t, context.Cause(g.ctx), context.DeadlineExceeded)
			})
		})
	}
}

func TestAttemptTimeoutIsATimeout(t *testing.T) {
	t.Parallel()
	assert.ErrorIs(t, errAttemptTimeout, context.DeadlineExceeded)
	var timeout interface{ Timeout() bool }
	assert.True(t, errors.As(errAttemptTimeout, &timeout) && timeout.Timeout())
}

type closeRecorder struct{ closed bool }

func (c *closeRecorder) Read([]byte) (int, error) { return 0, errors.New("read after timeout") }
func (c *closeRecorder) Close() error             { c.closed = true; return nil }

// BenchmarkCheckRequest is the cost, on the success path, of checking a
// request with typical headers before its first attempt.
func BenchmarkCheckRequest(b *testing.B) {
	req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/items/7", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "retry-bench/1")
	req.Header.Set("Authorization", "Bearer 0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		if err := checkRequest(req); err != nil {
			b.Fatal(err)
		}
	}
}
