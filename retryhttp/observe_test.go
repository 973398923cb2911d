package retryhttp_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

var busyThenOK = []reply{{status: 503, body: "busy"}, {status: 503, body: "busy"}, {status: 200, body: "ok"}}

// A hook shared by every request of a client can tell which request it
// sees, and learns each attempt and the end of the call.
func TestObserveSeesTheRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busyThenOK...)
	type line struct {
		method, url string
		attempt     int
		retry, done bool
	}
	var mu sync.Mutex
	var lines []line
	client := retryhttp.NewClient(srv.Client(), retry.Policy{
		Backoff: retry.Constant(0),
		Observe: func(ctx context.Context, e retry.Event) {
			req := retryhttp.RequestFrom(ctx)
			require.NotNil(t, req)
			mu.Lock()
			lines = append(lines, line{req.Method, req.URL.Path, e.Attempt, e.Retry, e.Done})
			mu.Unlock()
		},
	})
	resp, err := client.Get(srv.URL + "/items/7")
	require.NoError(t, err)
	assert.Equal(t, "ok", readAll(t, resp))
	assert.Equal(t, []line{
		{"GET", "/items/7", 1, true, false},
		{"GET", "/items/7", 2, true, false},
		{"GET", "/items/7", 3, false, false},
		{"GET", "/items/7", 3, false, true},
	}, lines)
	assert.Nil(t, retryhttp.RequestFrom(context.Background()))
}

// The response tells which attempt produced it.
func TestResponseAttempt(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busyThenOK...)
	client := retryhttp.NewClient(srv.Client(), retry.Policy{Backoff: retry.Constant(0)})
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	readAll(t, resp)
	assert.Equal(t, 3, retry.AttemptFrom(resp.Request.Context()))

	srv = newServer(t, reply{status: 200, body: "ok"})
	resp, err = client.Get(srv.URL)
	require.NoError(t, err)
	readAll(t, resp)
	assert.Equal(t, 1, retry.AttemptFrom(resp.Request.Context()))

	// A response returned after giving up tells it too.
	srv = newServer(t, reply{status: 503, body: "busy"})
	resp, err = retryhttp.NewClient(srv.Client(), retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)}).Get(srv.URL)
	require.NoError(t, err)
	readAll(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 2, retry.AttemptFrom(resp.Request.Context()))
}

// One shared client serves requests with different policies: the request's
// context can carry its own.
func TestWithPolicyOverridesPerRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t, reply{status: 503, body: "busy"})
	client := retryhttp.NewClient(srv.Client(), retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)})

	ctx := retryhttp.WithPolicy(t.Context(), retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	readAll(t, resp)
	assert.Len(t, srv.requests(), 2, "the request's policy")

	resp, err = client.Get(srv.URL)
	require.NoError(t, err)
	readAll(t, resp)
	assert.Len(t, srv.requests(), 2+4, "the client's policy")
}

// A loop around a client that retries does not retry what that client gave
// up on: CheckResponse knows the response's retries are spent. Transient
// brings the outer retries back.
func TestOuterLoopDoesNotRetryWhatTransportGaveUpOn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, reply{status: 503, body: "busy"})
	client := retryhttp.NewClient(srv.Client(), retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
	call := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return retry.CheckResponse(resp)
	}

	err := retry.Do(t.Context(), call, retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrAlreadyRetried)
	var re *retry.ResponseError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 503, re.StatusCode)
	assert.Len(t, srv.requests(), 3, "the transport's 3 attempts, not 3 x 4")

	err = retry.Do(t.Context(), func(ctx context.Context) error { return retry.Transient(call(ctx)) },
		retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrExhausted)
	assert.Len(t, srv.requests(), 3+2*3, "two layers on purpose")

	// A transport error is a *retry.Error, which an outer loop does not
	// retry either.
	srv.Close()
	outer := 0
	err = retry.Do(t.Context(), func(ctx context.Context) error { outer++; return call(ctx) },
		retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrAlreadyRetried)
	assert.Equal(t, 1, outer)
}
