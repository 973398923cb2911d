package retryhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// hang is a handler that answers nothing until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// The client's Timeout, moved to the Transport by NewClient, bounds every
// attempt and wait, and the error keeps the *retry.Error, its attempts and
// its outcome, every time: net/http's own Client.Timeout would replace it.
func TestNewClientTimeoutKeepsRetryError(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, hang)
	client := retryhttp.NewClient(&http.Client{Timeout: 300 * time.Millisecond}, retry.Policy{
		MaxAttempts:    -1, // only the timeout ends it
		AttemptTimeout: 50 * time.Millisecond,
		Backoff:        retry.Constant(10 * time.Millisecond),
	})
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			resp, err := client.Get(srv.URL)
			if resp != nil {
				resp.Body.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		var re *retry.Error
		require.ErrorAs(t, err, &re, "call %d: %v", i, err)
		assert.GreaterOrEqual(t, re.Attempts, 2, "call %d", i)
		assert.True(t, re.OutcomeUnknown, "call %d: timed-out attempts may have been processed", i)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
		var ne interface{ Timeout() bool }
		require.ErrorAs(t, err, &ne, "call %d", i)
		assert.True(t, ne.Timeout(), "call %d: the *url.Error says it timed out", i)
	}
}

// The Transport's Timeout bounds the reading of the returned body too, as
// http.Client.Timeout does, and is released when the body is closed.
func TestTransportTimeoutBoundsTheBody(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "first part")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	client := &http.Client{Transport: &retryhttp.Transport{Timeout: 200 * time.Millisecond}}
	start := time.Now()
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "first part", string(body))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the body read ran into the timeout")
	assert.Less(t, time.Since(start), 10*time.Second, "the timeout did not bound the body")
}

// A redirect goes on with the time left, as http.Client.Timeout counts it:
// a chain of slow redirects cannot outlive the Timeout.
func TestTransportTimeoutCoversRedirects(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(60 * time.Millisecond)
		http.Redirect(w, r, "/hop", http.StatusFound)
	})
	srv := newServerFunc(t, mux.ServeHTTP)
	client := &http.Client{
		Transport: &retryhttp.Transport{Timeout: 200 * time.Millisecond},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 50 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
	_, err := client.Get(srv.URL + "/hop")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the chain ran out of time, not of redirects: %v", err)
}

// A request that is not retried is bounded by the Timeout all the same.
func TestTransportTimeoutPassThrough(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, hang)
	client := &http.Client{Transport: &retryhttp.Transport{Timeout: 100 * time.Millisecond}}
	resp, err := client.Post(srv.URL, "text/plain", nil)
	if resp != nil {
		resp.Body.Close()
	}
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// When the drain of a discarded 503 whose body stalls runs into the
// request's deadline, no retry follows, and Observe is not told that one
// will: the attempt's event says no retry, and the call's end follows.
func TestDrainIntoTheDeadlineIsNoRetry(t *testing.T) {
	t.Parallel()
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "busy")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	var events []retry.Event
	client := retryhttp.NewClient(&http.Client{Timeout: 300 * time.Millisecond}, retry.Policy{
		Backoff: retry.Constant(0),
		Observe: func(_ context.Context, e retry.Event) { events = append(events, e) },
	})
	resp, err := client.Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, events, 2, "one attempt, then the end")
	assert.False(t, events[0].Retry, "the attempt's event promised a retry that never came")
	assert.True(t, events[1].Done)
}

// A redirect with no body (Content-Length: 0, or any answer to HEAD) keeps
// the chain's deadline too: the Transport reads it from the previous hop's
// request, not from a body wrapper that such a response never gets. Five
// hops of 150ms against a Timeout of 400ms must fail, as http.Client.Timeout
// would; before, each hop got a fresh Timeout and the chain succeeded.
func TestTransportTimeoutCoversRedirectsWithoutBody(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			hops := 0
			var mu sync.Mutex
			srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(150 * time.Millisecond)
				mu.Lock()
				hops++
				n := hops
				mu.Unlock()
				if n >= 5 {
					w.WriteHeader(http.StatusOK)
					return
				}
				w.Header().Set("Location", "/next")
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusFound)
			})
			client := &http.Client{Transport: &retryhttp.Transport{Timeout: 400 * time.Millisecond}}
			req, err := http.NewRequest(method, srv.URL+"/first", nil)
			require.NoError(t, err)
			resp, err := client.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			require.Error(t, err, "the chain of 5 hops of 150ms outlived the 400ms Timeout")
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
}
