package retry_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// An inner loop's error is not retried by an outer one, whatever made the
// inner loop stop: retry at one layer.
func TestNestedDoRetriesAtOneLayer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		inner     retry.Policy
		err       error
		wantInner int
		reason    error
		outer     error // the outer loop's reason
	}{
		{"inner permanent", retry.Policy{}, retry.Permanent(errFlaky), 1, retry.ErrNotRetryable, retry.ErrNotRetryable},
		{"inner exhausted", retry.Policy{MaxAttempts: 3}, errFlaky, 3, retry.ErrExhausted, retry.ErrAlreadyRetried},
		{"inner budget refused", retry.Policy{Budget: retry.NewBudget(0, 0)}, errFlaky, 1, retry.ErrBudgetExhausted, retry.ErrAlreadyRetried},
		{"inner server delay too long", retry.Policy{MaxRetryAfter: time.Second}, retry.RetryAfter(errFlaky, time.Minute), 1, retry.ErrServerDelay, retry.ErrAlreadyRetried},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inner, outer := 0, 0
				err := retry.Do(t.Context(), func(ctx context.Context) error {
					outer++
					return retry.Do(ctx, func(context.Context) error { inner++; return tt.err }, tt.inner)
				}, retry.Policy{MaxAttempts: 4})
				require.Error(t, err)
				assert.Equal(t, 1, outer, "outer attempts")
				assert.Equal(t, tt.wantInner, inner, "inner attempts: only as many as the inner policy allows")
				var re *retry.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, tt.outer, re.Reason, "the outer loop stops at once, and says why")
				assert.ErrorIs(t, err, tt.reason, "the inner reason is reachable")
				assert.ErrorIs(t, err, errFlaky, "the last error is kept")
			})
		})
	}
}

// Transient around the inner error says: retry at two layers, on purpose.
func TestNestedDoTransientOptsIn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner, outer := 0, 0
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			outer++
			return retry.Transient(retry.Do(ctx, func(context.Context) error { inner++; return errFlaky }))
		})
		require.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 4, outer)
		assert.Equal(t, 16, inner)
	})
}

// The outcome of an inner loop carries over: an inner attempt that timed out
// leaves the outer call's outcome unknown.
func TestNestedDoKeepsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			return retry.Do(ctx, func(context.Context) error { return context.DeadlineExceeded },
				retry.Policy{MaxAttempts: 2})
		})
		var rerr *retry.Error
		require.ErrorAs(t, err, &rerr)
		assert.True(t, rerr.OutcomeUnknown)
	})
}

// Requests that net/http refuses before sending anything are never retried
// by a loop around an http.Client: each gets one attempt, no wait.
func TestDoStopsOnRequestsNetHTTPRefuses(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: &http.Transport{}}
	tests := []struct {
		name string
		req  func(t *testing.T) *http.Request
		text string
	}{
		{"unsupported scheme", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, "ftp://127.0.0.1/file", nil)
			require.NoError(t, err)
			return req
		}, `unsupported protocol scheme "ftp"`},
		{"invalid header name", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
			require.NoError(t, err)
			req.Header["X-Bad\x01Name"] = []string{"v"}
			return req
		}, "invalid header field name"},
		{"invalid header value", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
			require.NoError(t, err)
			req.Header.Set("X-Token", "a\x00b")
			return req
		}, "invalid header field value"},
		{"invalid method", func(t *testing.T) *http.Request {
			req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
			require.NoError(t, err)
			req.Method = "GE T"
			return req
		}, "invalid method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req(t)
			attempts, retries := 0, 0
			err := retry.Do(t.Context(), func(ctx context.Context) error {
				attempts++
				resp, err := client.Do(req.WithContext(ctx))
				if err != nil {
					return err
				}
				resp.Body.Close()
				return retry.CheckResponse(resp)
			}, retry.Policy{Backoff: retry.Constant(time.Hour), Observe: func(_ context.Context, e retry.Event) {
				if e.Retry {
					retries++
				}
			}})
			require.ErrorIs(t, err, retry.ErrNotRetryable)
			assert.ErrorContains(t, err, tt.text)
			assert.Equal(t, 1, attempts)
			assert.Zero(t, retries)
			var rerr *retry.Error
			require.ErrorAs(t, err, &rerr)
			assert.False(t, rerr.OutcomeUnknown, "nothing was sent")
		})
	}
}
