package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// cuts reports whether err, learned after two seconds of successes at
// 100/s, cuts a fresh Limiter's rate.
func cuts(err error) bool {
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err)
	return lim.Rate() > 0
}

// unrepeatable is an error whose attempt must not be repeated, as
// retryhttp's is for a POST.
type unrepeatable struct{ error }

func (u unrepeatable) Unwrap() error       { return u.error }
func (u unrepeatable) Unrepeatable() error { return retry.ErrNotIdempotent }

// Which errors are throttling answers, wherever they sit in the tree.
func TestThrottled(t *testing.T) {
	t.Parallel()
	var nilResponse *retry.ResponseError
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"429", &retry.ResponseError{StatusCode: 429}, true},
		{"429 with Retry-After", err429, true},
		{"503 with Retry-After", &retry.ResponseError{StatusCode: 503, RetryAfter: 2 * time.Second}, true},
		{"503 without", &retry.ResponseError{StatusCode: 503}, false},
		{"500", err500, false},
		{"403", &retry.ResponseError{StatusCode: 403}, false},
		{"wrapped 429", fmt.Errorf("get: %w", err429), true},
		{"429 in a join", errors.Join(errors.New("a"), fmt.Errorf("b: %w", err429)), true},
		{"429 behind RetryAfter", retry.RetryAfter(err429, time.Second), true},
		{"429 as a loop's last error", &retry.Error{Attempts: 4, Reason: retry.ErrExhausted, Last: err429}, true},
		{"429 of a POST", unrepeatable{err429}, true},
		{"Throttled() true", throttledError{true}, true},
		{"Throttled() false", throttledError{false}, false},
		{"wrapped Throttled()", fmt.Errorf("rpc: %w", throttledError{true}), true},
		{"nil *ResponseError", nilResponse, false},
		{"deadline", context.DeadlineExceeded, false},
		{"plain", errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, cuts(tt.err), tt.name)
	}
}

// A quota of 0 left (RateLimit r=0, X-RateLimit-Remaining: 0) is a
// throttling answer on any status: GitHub refuses a spent quota with 403.
func TestThrottledQuotaSpent(t *testing.T) {
	t.Parallel()
	for _, h := range []http.Header{
		{"X-Ratelimit-Remaining": {"0"}},
		{"Ratelimit": {`"default";r=0;t=30`}},
	} {
		err := retry.CheckResponse(&http.Response{StatusCode: 403, Status: "403 Forbidden", Header: h})
		require.Error(t, err)
		assert.True(t, cuts(err), "403 with %v", h)
	}
	err := retry.CheckResponse(&http.Response{StatusCode: 403, Status: "403 Forbidden",
		Header: http.Header{"X-Ratelimit-Remaining": {"10"}}})
	assert.False(t, cuts(err), "403 with quota left")
}

// The server's delay that a throttle carries holds the next cut back until
// it has passed, however the error carries it.
func TestThrottleHoldsForTheServersDelay(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&retry.ResponseError{StatusCode: 429, RetryAfter: 5 * time.Second},
		retry.RetryAfter(&retry.ResponseError{StatusCode: 429}, 5*time.Second),
		retry.RetryAfter(throttledError{true}, 5*time.Second),
		unrepeatable{&retry.ResponseError{StatusCode: 429, RetryAfter: 5 * time.Second}},
	} {
		lim := &adaptive.Limiter{}
		now := served(lim, 0, 2*time.Second, 100)
		lim.LearnAt(at(now), 5*time.Millisecond, err)
		rate := lim.Rate()
		require.Positive(t, rate, "%v", err)
		// 4.9s later, an attempt sent 1.5s after the cut is throttled, while
		// the provider accepts little: still within the server's delay.
		served(lim, now, 4900*time.Millisecond, 10)
		lim.LearnAt(at(now+4900*time.Millisecond), 3400*time.Millisecond, err)
		assert.GreaterOrEqual(t, lim.Rate(), rate, "within the delay: %v", err)
		// After it, the same cuts.
		lim.LearnAt(at(now+5200*time.Millisecond), 5*time.Millisecond, err)
		assert.Less(t, lim.Rate(), rate, "after the delay: %v", err)
	}
}
