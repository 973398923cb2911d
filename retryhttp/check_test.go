package retryhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// A request that can never be sent is refused at once: the checks net/http
// makes before sending are made once, before the first attempt, and an
// unsupported scheme fails its one attempt with an error the default
// classifier stops on. No wait either way.
func TestRoundTripRefusesRequestsThatCannotBeSent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		url    string
		method string
		header http.Header
		want   string
	}{
		{"unsupported scheme", "ftp://127.0.0.1/file", "GET", nil, `unsupported protocol scheme "ftp"`},
		{"invalid header name", "http://127.0.0.1:1/", "GET", http.Header{"X-Bad\x01Name": {"v"}}, `invalid header field name "X-Bad\x01Name"`},
		{"invalid header value", "http://127.0.0.1:1/", "GET", http.Header{"X-Token": {"secret\x00"}}, `invalid header field value for "X-Token"`},
		{"invalid method", "http://127.0.0.1:1/", "GE T", nil, `invalid method "GE T"`},
		{"no host", "http:///path", "GET", nil, "no host in request URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &tracker{base: &http.Transport{}}
			var retries int
			client := &http.Client{Transport: &retryhttp.Transport{Base: tr, Policy: retry.Policy{
				Backoff: retry.Constant(time.Hour),
				Observe: func(_ context.Context, e retry.Event) {
					if e.Retry {
						retries++
					}
				},
			}}}
			req, err := http.NewRequest(http.MethodGet, tt.url, nil)
			require.NoError(t, err)
			req.Method = tt.method
			for k, v := range tt.header {
				req.Header[k] = v
			}
			start := time.Now()
			resp, err := client.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.LessOrEqual(t, tr.Calls(), 1, "attempts sent")
			assert.Zero(t, retries)
			assert.Less(t, time.Since(start), time.Minute, "it waited")
			// A loop around this client does not retry it either.
			_, stop := retry.Next(retry.Policy{}, 1, 0, err, time.Now(), time.Time{}, 0)
			assert.ErrorIs(t, stop, retry.ErrNotRetryable)
		})
	}
}

// A secret in an invalid header value stays out of the error.
func TestRoundTripInvalidValueKeepsSecret(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer hunter2\n")
	_, err = (&retryhttp.Transport{Base: &http.Transport{}}).RoundTrip(req)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}

// A Base that breaks the RoundTripper contract, answering neither a response
// nor an error, gets a clear error, with or without AttemptTimeout.
func TestRoundTripBaseReturnsNothing(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{0, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			base := roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
			rt := &retryhttp.Transport{Base: base, Policy: retry.Policy{AttemptTimeout: timeout, MaxAttempts: 2}}
			resp, err := get(t, t.Context(), rt)
			assert.Nil(t, resp)
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), "neither a response nor an error"), "AttemptTimeout %v: %v", timeout, err)
		})
	}
}

// A nil request gets an error, not a panic.
func TestRoundTripNilRequest(t *testing.T) {
	t.Parallel()
	resp, err := (&retryhttp.Transport{}).RoundTrip(nil)
	assert.Nil(t, resp)
	assert.Error(t, err)
}
