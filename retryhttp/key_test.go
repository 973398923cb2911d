package retryhttp_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// dropServer closes the connection of every request without an answer, and
// records the Idempotency-Key each one carried.
type dropServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newDropServer(t testing.TB) *dropServer {
	s := &dropServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestKeyFromAFailedCall(t *testing.T) {
	t.Parallel()
	srv := newDropServer(t)
	tr := &retryhttp.Transport{
		Policy:         retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)},
		IdempotencyKey: func(*http.Request) string { return `order "42"` },
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	if resp != nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	assert.Equal(t, `order "42"`, retryhttp.KeyFrom(err), "through the client's *url.Error")

	var re *retry.Error
	require.ErrorAs(t, err, &re, "the call's error is still a *retry.Error")
	assert.Equal(t, 3, re.Attempts)
	assert.True(t, re.OutcomeUnknown, "a connection closed after the request was sent")
	assert.True(t, retry.OutcomeUnknown(err))
	assert.ErrorIs(t, err, retry.ErrExhausted)
	assert.NotContains(t, err.Error(), "order", "the key does not change the error's text")

	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.NotEmpty(t, srv.keys)
	for _, k := range srv.keys {
		assert.Equal(t, `"order \"42\""`, k, "every attempt sent the key KeyFrom returns")
	}
}

func TestKeyFromTheRequestsOwnKey(t *testing.T) {
	t.Parallel()
	srv := newDropServer(t)
	tr := &retryhttp.Transport{Policy: retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)}}
	for _, header := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set(header, "mine-1")
		resp, err := tr.RoundTrip(req)
		require.Nil(t, resp)
		var re *retry.Error
		require.True(t, errors.As(err, &re))
		assert.Equal(t, 2, re.Attempts, "a keyed POST is retried")
		assert.Equal(t, "mine-1", retryhttp.KeyFrom(err), header)
	}
}

func TestKeyFromNoKey(t *testing.T) {
	t.Parallel()
	srv := newDropServer(t)
	tr := &retryhttp.Transport{Policy: retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)}}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	assert.Empty(t, retryhttp.KeyFrom(err), "a GET carries no key")
	assert.Empty(t, retryhttp.KeyFrom(nil))
	assert.Empty(t, retryhttp.KeyFrom(errors.New("other")))
}

// After a call whose outcome is unknown, the key is what to ask the server
// about before sending the work again.
func ExampleKeyFrom() {
	// A server that takes the request and drops the connection.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()

	client := retryhttp.NewClient(nil, retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	client.Transport.(*retryhttp.Transport).IdempotencyKey = func(*http.Request) string { return "order-42" }
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"amount": 100}`))
	if err != nil {
		fmt.Printf("outcome unknown: %v; ask the server about key %s\n", retry.OutcomeUnknown(err), retryhttp.KeyFrom(err))
		return
	}
	resp.Body.Close()
	// Output: outcome unknown: true; ask the server about key order-42
}
