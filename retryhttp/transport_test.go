package retryhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// fast retries at once, three attempts in all.
var fast = retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}

var busy = reply{status: http.StatusServiceUnavailable, body: "busy"}

func TestRoundTripRetriesOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	optInPOST := func(r *http.Request) bool {
		return retryhttp.DefaultRetryable(r) || r.Method == http.MethodPost
	}
	tests := []struct {
		name      string
		method    string
		header    map[string]string
		body      string
		retryable func(*http.Request) bool
		want      int // requests the server sees
	}{
		{name: "GET", method: http.MethodGet, want: 3},
		{name: "empty method means GET", method: "", want: 3},
		{name: "HEAD", method: http.MethodHead, want: 3},
		{name: "OPTIONS", method: http.MethodOptions, want: 3},
		{name: "TRACE", method: http.MethodTrace, want: 3},
		{name: "PUT with body", method: http.MethodPut, body: "payload", want: 3},
		{name: "DELETE", method: http.MethodDelete, want: 3},
		{name: "POST without key", method: http.MethodPost, body: "payload", want: 1},
		{name: "POST with Idempotency-Key", method: http.MethodPost, body: "payload",
			header: map[string]string{"Idempotency-Key": "k1"}, want: 3},
		{name: "POST with X-Idempotency-Key", method: http.MethodPost, body: "payload",
			header: map[string]string{"X-Idempotency-Key": "k1"}, want: 3},
		{name: "POST with empty Idempotency-Key", method: http.MethodPost, body: "payload",
			header: map[string]string{"Idempotency-Key": ""}, want: 1},
		{name: "PATCH", method: http.MethodPatch, body: "payload", want: 1},
		{name: "PATCH with Idempotency-Key", method: http.MethodPatch, body: "payload",
			header: map[string]string{"Idempotency-Key": "k1"}, want: 3},
		{name: "lower-case get is not GET", method: "get", want: 1},
		{name: "unknown method", method: "PURGE", want: 1},
		{name: "POST opted in", method: http.MethodPost, body: "payload", retryable: optInPOST, want: 3},
		{name: "PATCH not opted in with POST", method: http.MethodPatch, body: "payload", retryable: optInPOST, want: 1},
		{name: "Retryable can narrow", method: http.MethodGet,
			retryable: func(*http.Request) bool { return false }, want: 1},
		{name: "CONNECT never, even with a key and Retryable", method: http.MethodConnect,
			header: map[string]string{"Idempotency-Key": "k1"}, retryable: func(*http.Request) bool { return true }, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, busy)
			rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: fast, Retryable: tt.retryable}
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, err := http.NewRequest(tt.method, srv.URL, body)
			require.NoError(t, err)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}

			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			readAll(t, resp)

			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			got := srv.requests()
			assert.Len(t, got, tt.want, "requests seen by the server")
			for i, s := range got {
				assert.Equal(t, tt.body, s.body, "body of request %d", i+1)
			}
		})
	}
}

// A body without GetBody cannot be replayed without buffering it, so the
// request is sent once even though PUT is idempotent.
func TestRoundTripSendsStreamingBodyOnce(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	tr := &tracker{base: srv.Client().Transport}
	rt := &retryhttp.Transport{Base: tr, Policy: fast}
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "streamed ")
		io.WriteString(pw, "payload")
		pw.Close()
	}()
	req, err := http.NewRequest(http.MethodPut, srv.URL, pr)
	require.NoError(t, err)
	require.Nil(t, req.GetBody)

	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "busy", readAll(t, resp))

	got := srv.requests()
	require.Len(t, got, 1)
	assert.Equal(t, "streamed payload", got[0].body)
	assert.Equal(t, 1, tr.Calls(), "Base.RoundTrip calls")
}

// A request that is not retried is a call of one attempt, which says why it
// stopped.
func TestRoundTripRequestNotRetriedIsOneAttempt(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	srv.Close() // nothing listens any more: connection refused
	tr := &tracker{base: &http.Transport{}}
	rt := &retryhttp.Transport{Base: tr, Policy: fast}
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)
	require.Error(t, err)
	assert.Nil(t, resp)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Attempts)
	assert.Equal(t, retry.ErrNotIdempotent, re.Reason, "the policy's rule stopped it, not the error's nature")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, 1, tr.Calls(), "Base.RoundTrip calls")
}

func TestRoundTripReturnsTransportErrorsAsRetryError(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	srv.Close()
	tr := &tracker{base: &http.Transport{}}
	rt := &retryhttp.Transport{Base: tr, Policy: fast}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 3, re.Attempts)
	assert.ErrorIs(t, err, retry.ErrExhausted)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, 3, tr.Calls(), "Base.RoundTrip calls")
}

// Through an http.Client, the *retry.Error is wrapped in a *url.Error and
// still reachable.
func TestNewClientRetriesAndReturnsLastResponse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy, reply{status: http.StatusOK, body: "hello"})
	client := retryhttp.NewClient(srv.Client(), fast)

	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "hello", readAll(t, resp))
	assert.Len(t, srv.requests(), 2)

	srv.Close()
	_, err = client.Get(srv.URL)
	assert.ErrorIs(t, err, retry.ErrExhausted)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func TestNewClientCopiesBase(t *testing.T) {
	t.Parallel()
	base := &http.Transport{}
	jarless := &http.Client{Transport: base, Timeout: 7 * time.Second}
	c := retryhttp.NewClient(jarless, retry.Policy{MaxAttempts: 7})

	require.NotSame(t, jarless, c)
	assert.Same(t, base, jarless.Transport, "base client changed")
	assert.Equal(t, 7*time.Second, jarless.Timeout, "base client changed")
	rt, ok := c.Transport.(*retryhttp.Transport)
	require.True(t, ok, "Transport is %T", c.Transport)
	assert.Same(t, base, rt.Base)
	assert.Equal(t, 7, rt.Policy.MaxAttempts)
	assert.Zero(t, c.Timeout, "the client's Timeout would hide the *retry.Error")
	assert.Equal(t, 7*time.Second, rt.Timeout, "the Timeout moved to the Transport")

	c = retryhttp.NewClient(nil, retry.Policy{})
	rt, ok = c.Transport.(*retryhttp.Transport)
	require.True(t, ok, "Transport is %T", c.Transport)
	assert.Nil(t, rt.Base)
	assert.Zero(t, c.Timeout)
}

func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	t.Parallel()
	closer := &idleCloser{}
	retryhttp.NewClient(&http.Client{Transport: closer}, retry.Policy{}).CloseIdleConnections()
	assert.Equal(t, 1, closer.closed)
}

type idleCloser struct {
	http.RoundTripper
	closed int
}

func (c *idleCloser) CloseIdleConnections() { c.closed++ }

// Every discarded response is drained and closed, so its connection goes
// back to the pool and the next attempt reuses it; a body too long to drain
// is closed without reading more than 64 KiB.
func TestRoundTripDrainsAndClosesDiscardedBodies(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1<<20)
	tests := []struct {
		name     string
		discard  reply
		wantConn int64 // connections the server accepts for three attempts
	}{
		{name: "known length", discard: busy, wantConn: 1},
		{name: "chunked", discard: reply{status: http.StatusServiceUnavailable, body: "busy", chunked: true}, wantConn: 1},
		{name: "empty", discard: reply{status: http.StatusServiceUnavailable}, wantConn: 1},
		{name: "too long to drain", discard: reply{status: http.StatusServiceUnavailable, body: long}, wantConn: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.discard, tt.discard, reply{status: http.StatusOK, body: "ok"})
			tr := &tracker{base: srv.Client().Transport}
			rt := &retryhttp.Transport{Base: tr, Policy: fast}
			var mu sync.Mutex
			var reused []bool
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				mu.Lock()
				reused = append(reused, info.Reused)
				mu.Unlock()
			}}
			ctx := httptrace.WithClientTrace(t.Context(), trace)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			require.NoError(t, err)

			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			bodies := tr.Bodies()
			require.Len(t, bodies, 3)
			for i, b := range bodies[:2] {
				assert.True(t, b.closed.Load(), "body %d closed", i+1)
				assert.LessOrEqual(t, b.read.Load(), int64(64<<10), "bytes drained from body %d", i+1)
			}
			assert.False(t, bodies[2].closed.Load(), "returned body closed before the caller read it")
			assert.Equal(t, "ok", readAll(t, resp))
			assert.Equal(t, tt.wantConn, srv.newConns.Load(), "connections accepted")
			if tt.wantConn == 1 {
				mu.Lock()
				assert.Equal(t, []bool{false, true, true}, reused, "GotConn.Reused per attempt")
				mu.Unlock()
			}
		})
	}
}

// When retrying stops on a response, the caller gets that last real
// response, readable, and no error.
func TestRoundTripReturnsLastResponseWhenItStops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		replies    []reply
		policy     retry.Policy
		timeout    time.Duration // of the request's context; 0 for none
		wantStatus int
		wantBody   string
		wantSeen   int
	}{
		{
			name:    "attempts exhausted",
			replies: []reply{{status: 503, body: "busy 1"}, {status: 502, body: "busy 2"}, {status: 503, body: "busy 3"}},
			policy:  fast, wantStatus: 503, wantBody: "busy 3", wantSeen: 3,
		},
		{
			name:    "status not retried",
			replies: []reply{{status: 404, body: "no such thing"}},
			policy:  fast, wantStatus: 404, wantBody: "no such thing", wantSeen: 1,
		},
		{
			name:       "budget refuses",
			replies:    []reply{busy},
			policy:     retry.Policy{Backoff: retry.Constant(0), Budget: retry.NewBudget(0, 0)},
			wantStatus: 503, wantBody: "busy", wantSeen: 1,
		},
		{
			name:    "Retry-After above the default ceiling",
			replies: []reply{{status: 503, body: "later", header: map[string]string{"Retry-After": "3600"}}},
			policy:  fast, wantStatus: 503, wantBody: "later", wantSeen: 1,
		},
		{
			name:       "retry-after-ms above MaxRetryAfter",
			replies:    []reply{{status: 429, body: "later", header: map[string]string{"Retry-After-Ms": "2000"}}},
			policy:     retry.Policy{Backoff: retry.Constant(0), MaxRetryAfter: time.Second},
			wantStatus: 429, wantBody: "later", wantSeen: 1,
		},
		{
			name:    "Retry-After past the deadline",
			replies: []reply{{status: 503, body: "later", header: map[string]string{"Retry-After": "120"}}},
			policy:  fast, timeout: time.Minute, wantStatus: 503, wantBody: "later", wantSeen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.replies...)
			rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: tt.policy}
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			require.NoError(t, err)

			start := time.Now()
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.Equal(t, tt.wantBody, readAll(t, resp))
			assert.Len(t, srv.requests(), tt.wantSeen)
			// "At once": far below any delay the server asked for. The exact
			// timing is pinned in synctest bubbles (timing_test.go).
			assert.Less(t, time.Since(start), 30*time.Second)
		})
	}
}

// The next attempt never starts before the server's requested delay.
func TestRoundTripWaitsForServerDelay(t *testing.T) {
	t.Parallel()
	srv := newServer(t,
		reply{status: 503, header: map[string]string{"Retry-After-Ms": "50"}},
		reply{status: http.StatusOK, body: "ok"})
	rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: fast}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	start := time.Now()
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "ok", readAll(t, resp))
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}

func TestRoundTripAttemptHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
		method string
		want   []string // the header's value on each request seen
	}{
		{name: "off by default", method: http.MethodGet, want: []string{"", "", ""}},
		{name: "on retries only", header: "Retry-Attempt", method: http.MethodGet, want: []string{"", "2", "3"}},
		{name: "not on a request that is not retried", header: "Retry-Attempt", method: http.MethodPost, want: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, busy)
			rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: fast, AttemptHeader: tt.header}
			req, err := http.NewRequest(tt.method, srv.URL, nil)
			require.NoError(t, err)

			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			readAll(t, resp)

			var got []string
			for _, s := range srv.requests() {
				got = append(got, s.header.Get("Retry-Attempt"))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// Retries send copies: the caller's request keeps its headers, body,
// context and URL, whatever the attempts added.
func TestRoundTripLeavesRequestUnmodified(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy, busy, reply{status: http.StatusOK, body: "ok"})
	rt := &retryhttp.Transport{
		Base:          srv.Client().Transport,
		Policy:        retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: time.Minute},
		AttemptHeader: "Retry-Attempt",
	}
	ctx := context.WithValue(t.Context(), ctxKey{}, "mine")
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/path?q=1", bytes.NewReader([]byte("payload")))
	require.NoError(t, err)
	req.Header.Set("X-Caller", "1")

	header := req.Header.Clone()
	body, getBody := req.Body, reflect.ValueOf(req.GetBody).Pointer()
	url := req.URL.String()

	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "ok", readAll(t, resp))

	assert.Equal(t, header, req.Header)
	assert.Same(t, ctx, req.Context())
	assert.Equal(t, body, req.Body)
	assert.Equal(t, getBody, reflect.ValueOf(req.GetBody).Pointer())
	assert.Equal(t, url, req.URL.String())
	assert.Equal(t, http.MethodPut, req.Method)
	assert.Equal(t, int64(len("payload")), req.ContentLength)
	for i, s := range srv.requests() {
		assert.Equal(t, "payload", s.body, "body of request %d", i+1)
		assert.Equal(t, "1", s.header.Get("X-Caller"), "X-Caller of request %d", i+1)
	}
}

type ctxKey struct{}

// An error from GetBody stops the loop and is kept in the returned error.
func TestRoundTripStopsOnGetBodyError(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: fast}
	req, err := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	errRewind := errors.New("cannot rewind")
	req.GetBody = func() (io.ReadCloser, error) { return nil, errRewind }

	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, errRewind)
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.ErrorAs(t, err, new(*retry.Error))
	assert.Len(t, srv.requests(), 1)
}

// If the request's context ends while a response is held, the response is
// closed and the context's cause comes back in a *retry.Error.
func TestRoundTripContextEndsWhileHoldingResponse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	errGone := errors.New("caller gone")
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	tr := &tracker{base: srv.Client().Transport}
	cancelling := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(r)
		cancel(errGone) // after the response arrived, before the loop looks at it
		return resp, err
	})
	rt := &retryhttp.Transport{Base: cancelling, Policy: fast}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, errGone)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Attempts)
	var respErr *retry.ResponseError
	require.ErrorAs(t, err, &respErr)
	assert.Equal(t, 503, respErr.StatusCode)
	bodies := tr.Bodies()
	require.Len(t, bodies, 1)
	assert.True(t, bodies[0].closed.Load(), "held body closed")
}

// A wait cut short by the caller's context returns the context's cause; the
// discarded response was closed before the wait, and before the user's
// Observe saw the retry.
func TestRoundTripContextEndsDuringWait(t *testing.T) {
	t.Parallel()
	srv := newServer(t, reply{status: 503, body: "busy", header: map[string]string{"Retry-After": "60"}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tr := &tracker{base: srv.Client().Transport}
	closedBeforeHook := false
	p := retry.Policy{Observe: func(_ context.Context, e retry.Event) {
		if !e.Retry {
			return
		}
		bodies := tr.Bodies()
		closedBeforeHook = len(bodies) == 1 && bodies[0].closed.Load()
		cancel()
	}}
	rt := &retryhttp.Transport{Base: tr, Policy: p}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorAs(t, err, new(*retry.ResponseError))
	assert.True(t, closedBeforeHook, "discarded body closed before Observe saw the retry")
	assert.Len(t, srv.requests(), 1)
}

// A request whose context is done before the first attempt is never sent,
// and its body is closed all the same, as a RoundTripper must.
func TestRoundTripContextDoneBeforeFirstAttempt(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	body := &trackedBody{rc: io.NopCloser(strings.NewReader("payload"))}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("payload")), nil }
	rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: fast}

	resp, err := rt.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.Canceled)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Zero(t, re.Attempts)
	assert.True(t, body.closed.Load(), "request body closed")
	assert.Empty(t, srv.requests())
}

// Over a real connection: an attempt whose headers are late is abandoned at
// AttemptTimeout and retried, and the body of the response returned is not
// cut by it, although the caller reads it long after. Margins are wide (1s
// for loopback headers); the exact timing is pinned in timing_test.go.
func TestRoundTripAttemptTimeoutOverNetwork(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	var mu sync.Mutex
	n := 0
	attemptErr := make(chan error, 1)
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			<-r.Context().Done() // no headers until the client gives up
			return
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		select {
		case <-time.After(2 * timeout): // the caller reads on past the timeout
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second")
	})
	base := srv.Client().Transport
	spy := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err != nil {
			attemptErr <- err
		}
		return resp, err
	})
	rt := &retryhttp.Transport{Base: spy, Policy: retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: timeout}}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)

	start := time.Now()
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), timeout)
	assert.Equal(t, "first second", readAll(t, resp))
	assert.GreaterOrEqual(t, time.Since(start), 3*timeout)
	select {
	case err := <-attemptErr:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	default:
		t.Error("the first attempt did not fail")
	}
}

// One Transport serves many goroutines at once (run with -race).
func TestRoundTripConcurrentUse(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Retry-Attempt") == "" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	client := &http.Client{Transport: &retryhttp.Transport{
		Base:          srv.Client().Transport,
		Policy:        retry.Policy{Backoff: retry.Constant(0), Budget: retry.NewBudget(1, 0), AttemptTimeout: time.Minute},
		AttemptHeader: "Retry-Attempt",
	}}
	const goroutines, calls = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*calls)
	for range goroutines {
		wg.Go(func() {
			for range calls {
				resp, err := client.Get(srv.URL)
				if err != nil {
					errs <- err
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "ok" {
					errs <- errors.Join(err, errors.New("body "+string(b)))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The body of a 101 Switching Protocols response stays writable when
// AttemptTimeout wraps it, as http.Client and WebSocket libraries expect.
func TestRoundTripKeepsUpgradedBodyWritable(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		line, _ := rw.ReadString('\n')
		io.WriteString(rw, line)
		rw.Flush()
	})
	rt := &retryhttp.Transport{Base: srv.Client().Transport, Policy: retry.Policy{AttemptTimeout: time.Minute}}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")

	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "body %T is not an io.ReadWriteCloser", resp.Body)
	_, err = io.WriteString(rwc, "ping\n")
	require.NoError(t, err)
	got := make([]byte, len("ping\n"))
	_, err = io.ReadFull(rwc, got)
	require.NoError(t, err)
	assert.Equal(t, "ping\n", string(got))
	require.NoError(t, rwc.Close())
}

// The drain of a discarded response is bounded even when nothing else
// bounds it (no AttemptTimeout, a request without a deadline): a 503 whose
// body stalls is cut after a second, its connection closed, and the retry
// goes ahead. Before, the drain waited for the request's context, forever.
func TestDrainOfAStalledBodyIsBounded(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "busy")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the rest of the body never comes
			return
		}
		io.WriteString(w, "hello")
	})
	client := retryhttp.NewClient(srv.Client(), retry.Policy{Backoff: retry.Constant(0)})
	done := make(chan error, 1)
	go func() {
		resp, err := client.Get(srv.URL)
		if err == nil {
			defer resp.Body.Close()
			if body, _ := io.ReadAll(resp.Body); string(body) != "hello" {
				err = fmt.Errorf("body %q", body)
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
		assert.Equal(t, int32(2), n.Load(), "the retry went ahead")
	case <-time.After(time.Minute):
		t.Fatal("the drain of the stalled body held the retry")
	}
}

// countingLimiter is a Limiter that grants every booking at once and counts
// them.
type countingLimiter struct{ booked, cancelled atomic.Int32 }

func (l *countingLimiter) Reserve(_ context.Context, t time.Time) (retry.Reservation, error) {
	l.booked.Add(1)
	return retry.Reservation{Start: t}, nil
}
func (l *countingLimiter) Cancel(retry.Reservation) { l.cancelled.Add(1) }

// countingBudget is a Budget that grants everything and counts deposits.
type countingBudget struct{ deposits, withdrawals atomic.Int32 }

func (b *countingBudget) Deposit(time.Time)       { b.deposits.Add(1) }
func (b *countingBudget) Withdraw(time.Time) bool { b.withdrawals.Add(1); return true }

// Every request goes through the policy, whether it may be retried or not: a
// POST without an idempotency key, a request whose body cannot be replayed
// and a CONNECT are each a call of one attempt, paced by the Limiter,
// deposited in the Budget and observed, then not retried, with a Reason that
// says which rule stopped it.
func TestEveryRequestGoesThroughThePolicy(t *testing.T) {
	t.Parallel()
	srv := newServer(t, busy, busy, busy, busy)
	lim, budget := &countingLimiter{}, &countingBudget{}
	var mu sync.Mutex
	var attempts, dones int
	var reasons []error
	client := retryhttp.NewClient(srv.Client(), retry.Policy{
		Backoff: retry.Constant(0), Limiter: lim, Budget: budget,
		Observe: func(ctx context.Context, e retry.Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Done {
				dones++
				reasons = append(reasons, e.Reason)
			} else {
				attempts++
				assert.False(t, e.Retry, "no retry follows")
				assert.NotNil(t, retryhttp.RequestFrom(ctx))
			}
		},
	})
	for range 3 {
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("charge"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the last real response")
		resp.Body.Close()
	}
	req, err := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("stream")))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	assert.Len(t, srv.requests(), 4, "one attempt each")
	assert.Equal(t, int32(4), lim.booked.Load(), "every attempt was paced")
	assert.Zero(t, lim.cancelled.Load())
	assert.Equal(t, int32(4), budget.deposits.Load(), "every call deposited")
	assert.Zero(t, budget.withdrawals.Load(), "no retry asked the budget")
	assert.Equal(t, 4, attempts)
	assert.Equal(t, 4, dones)
	assert.Equal(t, []error{retry.ErrNotIdempotent, retry.ErrNotIdempotent, retry.ErrNotIdempotent, retryhttp.ErrBodyNotReplayable}, reasons)

	// CONNECT is never retried either, and its one attempt is a call too.
	tr := &tracker{base: &http.Transport{}}
	rt := &retryhttp.Transport{Base: tr, Policy: retry.Policy{Backoff: retry.Constant(0), Limiter: lim}}
	srv.Close()
	_, err = rt.RoundTrip(&http.Request{Method: http.MethodConnect, URL: &url.URL{Scheme: "http", Host: strings.TrimPrefix(srv.URL, "http://")}, Header: http.Header{}})
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, retry.ErrNotIdempotent, re.Reason)
	assert.Equal(t, 1, tr.Calls())
	assert.Equal(t, int32(5), lim.booked.Load())
}

// Transport.Client copies the Transport and the client, fills the copy's
// Base and Timeout from the client, and changes neither original.
func TestTransportClient(t *testing.T) {
	t.Parallel()
	base := &http.Client{Transport: &http.Transport{}, Timeout: time.Second}
	tr := &retryhttp.Transport{AttemptHeader: "Retry-Attempt"}
	c := tr.Client(base)
	got, ok := c.Transport.(*retryhttp.Transport)
	require.True(t, ok)
	assert.NotSame(t, tr, got)
	assert.Same(t, base.Transport, got.Base)
	assert.Equal(t, time.Second, got.Timeout)
	assert.Equal(t, "Retry-Attempt", got.AttemptHeader)
	assert.Zero(t, c.Timeout, "the Timeout moved to the Transport")
	assert.Nil(t, tr.Base, "t unchanged")
	assert.Equal(t, time.Second, base.Timeout, "base unchanged")

	own := &retryhttp.Transport{Base: http.DefaultTransport, Timeout: time.Minute}
	got = own.Client(nil).Transport.(*retryhttp.Transport)
	assert.Same(t, http.DefaultTransport, got.Base, "a Transport's own Base stays")
	assert.Equal(t, time.Minute, got.Timeout, "and its own Timeout")
}
