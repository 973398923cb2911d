package retryhttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// A POST with keys made by the Transport, against a server that fails the
// first two attempts and deduplicates on the key: three attempts, one
// effect, and the same key on all three, readable afterwards.
func TestIdempotencyKeyMadeOnceAndReused(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	effects := map[string]int{}
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		keys = append(keys, key)
		if len(keys) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		effects[key]++ // the server does the work once per key
		io.WriteString(w, "charged")
	})
	client := (&retryhttp.Transport{
		Policy:         retry.Policy{Backoff: retry.Constant(0)},
		IdempotencyKey: retryhttp.NewKey,
	}).Client(srv.Client())
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("amount=10"))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, "charged", readAll(t, resp))

	require.Len(t, keys, 3, "three attempts")
	assert.Regexp(t, `^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`, keys[0], "a quoted version 4 UUID")
	assert.Equal(t, keys[0], keys[1])
	assert.Equal(t, keys[0], keys[2], "the same key on every attempt")
	assert.Equal(t, map[string]int{keys[0]: 1}, effects, "one effect")
	assert.Equal(t, keys[0], resp.Request.Header.Get("Idempotency-Key"), "the key is readable afterwards")
	assert.Empty(t, req.Header.Get("Idempotency-Key"), "the caller's request is not changed")
}

// Keys are made only for requests that need one; a bad key is refused
// before any attempt.
func TestIdempotencyKeyOnlyWhereNeeded(t *testing.T) {
	t.Parallel()
	var got []string
	var mu sync.Mutex
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	})
	key := func(*http.Request) string { return `order-"7"` }
	client := (&retryhttp.Transport{IdempotencyKey: key}).Client(srv.Client())
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodPatch} {
		req, err := http.NewRequest(m, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "mine")
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{"GET ", "PUT ", `POST "order-\"7\""`, `PATCH "order-\"7\""`, "POST mine"}, got)

	bad := (&retryhttp.Transport{IdempotencyKey: func(*http.Request) string { return "naïve" }}).Client(srv.Client())
	_, err = bad.Post(srv.URL, "text/plain", nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "printable ASCII")
	assert.Len(t, got, 5, "nothing was sent")
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool, 100_000)
	for range 100_000 {
		k := retryhttp.NewKey(nil)
		require.Regexp(t, uuid, k)
		require.False(t, seen[k], "key %s made twice", k)
		seen[k] = true
	}
}

// A slow GET is hedged; the hedge's response is returned and the slow
// attempt is cancelled, its connection closed.
func TestHedgedRequest(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // the first is stuck
			return
		}
		io.WriteString(w, "fast")
	})
	tr := &tracker{base: srv.Client().Transport}
	var events []retry.Event
	client := retryhttp.NewClient(&http.Client{Transport: tr}, retry.Policy{
		HedgeDelay: retry.Constant(20 * time.Millisecond),
		Observe:    func(_ context.Context, e retry.Event) { events = append(events, e) },
	})
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	assert.Equal(t, "fast", readAll(t, resp))
	assert.Equal(t, 2, retry.AttemptFrom(resp.Request.Context()), "the hedge's response")
	require.Len(t, events, 3)
	assert.True(t, events[0].Hedge)
	assert.NoError(t, events[0].Err)
	assert.ErrorIs(t, events[1].Err, context.Canceled, "the first attempt was cancelled")
	for _, b := range tr.Bodies() {
		assert.True(t, b.closed.Load(), "every body is closed")
	}
}

// A request that is not retried is never hedged.
func TestNotHedgedWhenNotRetryable(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(100 * time.Millisecond)
	})
	client := retryhttp.NewClient(srv.Client(), retry.Policy{HedgeDelay: retry.Constant(time.Millisecond)})
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	require.NoError(t, err)
	resp.Body.Close()
	req, err := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("stream")))
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, int32(2), n.Load(), "one request each")
}

// Over thousands of hedged calls (10,000 with RETRY_LONG=1 set, for
// .ci/run or .ci/test), over HTTP/1.1 and HTTP/2, nothing leaks: every body is closed,
// goroutines come back to where they were, and no connection is left open
// once the idle ones are closed. It is not parallel, so that the goroutine
// count is this test's alone.
func TestHedgingLeaksNothing(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			calls := 2000
			if os.Getenv("RETRY_LONG") == "1" {
				calls = 10_000
			}
			var served atomic.Int32
			var open atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if served.Add(1)%10 == 1 { // one in ten is slow: it waits for its cancel, or 50ms
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
				io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					open.Add(1)
				case http.StateClosed, http.StateHijacked:
					open.Add(-1)
				}
			}
			// HTTP/2 needs TLS here; HTTP/1.1 goes without, since every
			// cancelled hedge costs it a connection, and a TLS handshake each
			// would make the test slow for nothing it checks.
			if h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			base := srv.Client().Transport.(*http.Transport)
			base.MaxIdleConnsPerHost = 8
			tr := &tracker{base: base}
			client := retryhttp.NewClient(&http.Client{Transport: tr}, retry.Policy{HedgeDelay: retry.Constant(5 * time.Millisecond)})
			before := runtime.NumGoroutine()
			var wg sync.WaitGroup
			work := make(chan struct{})
			var failures atomic.Int32
			for range 8 {
				wg.Go(func() {
					for range work {
						resp, err := client.Get(srv.URL)
						if err != nil {
							failures.Add(1)
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			for range calls {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
			assert.Zero(t, failures.Load())
			assert.Greater(t, int(served.Load()), calls, "some calls were hedged")
			for i, b := range tr.Bodies() {
				if !b.closed.Load() {
					t.Fatalf("body %d of %d was never closed", i, len(tr.Bodies()))
				}
			}
			// Goroutines end a little after their connections close: wait,
			// generously, for them to come back near the count before.
			base.CloseIdleConnections()
			deadline := time.Now().Add(30 * time.Second)
			for runtime.NumGoroutine() > before+4 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			assert.LessOrEqual(t, runtime.NumGoroutine(), before+4, "goroutines left behind")
			// HTTP/1.1 closes a connection whose request is cancelled, and
			// CloseIdleConnections the rest. HTTP/2 resets the stream and
			// keeps the connection; net/http then keeps a connection that
			// has had streams reset open through CloseIdleConnections (a
			// plain http.Transport does the same, without retryhttp), so
			// one is allowed: the one all the calls shared.
			allowed := int32(0)
			if h2 {
				allowed = 1
			}
			for open.Load() > allowed && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			assert.LessOrEqual(t, open.Load(), allowed, "connections left open after the idle ones were closed")
		})
	}
}

// The winner of a hedged call is read after RoundTrip returns: its body must
// outlive the attempt, whose context the core ends as it returns, and over
// HTTP/1.1 its connection must go back to the pool. Before, every hedged
// call cost a new connection, and some bodies failed with context.Canceled.
func TestHedgedWinnerBodyOutlivesItsAttempt(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // the body comes after RoundTrip has returned
		io.WriteString(w, "hello")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := retryhttp.NewClient(srv.Client(), retry.Policy{HedgeDelay: retry.Constant(time.Second)})
	for i := range 20 {
		resp, err := client.Get(srv.URL)
		require.NoError(t, err, "call %d", i)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, "call %d: the body was cut", i)
		assert.Equal(t, "hello", string(body))
	}
	assert.Equal(t, int32(1), conns.Load(), "one connection for 20 calls that never needed a hedge")
}

// closeSpy is a response body that records that it was closed.
type closeSpy struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeSpy) Close() error { b.closed.Store(true); return nil }

// A hedged loser whose Base ignores the cancellation and answers anyway
// does not displace the winner: the winner's response is returned, and the
// loser's, unwanted, is closed and reported as the cancellation it was.
func TestHedgedLoserThatAnswersAnyway(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		bodies := []*closeSpy{{Reader: strings.NewReader("first")}, {Reader: strings.NewReader("hedge")}}
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			n := retry.AttemptFrom(r.Context())
			if n == 1 {
				time.Sleep(time.Second) // deaf to its cancellation
			}
			return &http.Response{StatusCode: http.StatusOK, Body: bodies[n-1], Request: r}, nil
		})
		var events []retry.Event
		client := (&retryhttp.Transport{Policy: retry.Policy{
			HedgeDelay: retry.Constant(10 * time.Millisecond),
			Observe:    func(_ context.Context, e retry.Event) { events = append(events, e) },
		}}).Client(&http.Client{Transport: base})
		resp, err := client.Get("http://example.invalid/")
		require.NoError(t, err)
		assert.Equal(t, "hedge", readAll(t, resp), "the winner's response")
		assert.True(t, bodies[0].closed.Load(), "the loser's response was closed")
		require.Len(t, events, 3, "the winner, the loser, the end")
		assert.Equal(t, 2, events[0].Attempt)
		assert.NoError(t, events[0].Err)
		assert.Equal(t, 1, events[1].Attempt)
		assert.ErrorIs(t, events[1].Err, context.Canceled, "the loser was cut as its answer came")
		assert.True(t, events[2].Done)
	})
}

// A hedged GET whose first attempt hangs until it is cut and whose hedge
// gets an answer that is not retried returns that answer, body unread, and
// a nil error, as the same call does unhedged: the cut loser's end, which
// follows it, does not replace it.
func TestHedgedFatalAnswerReturned(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusBadRequest, http.StatusNotImplemented} {
		var n atomic.Int32
		srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				<-r.Context().Done() // hangs until it is cut
				return
			}
			w.WriteHeader(status)
			io.WriteString(w, "the answer")
		})
		client := retryhttp.NewClient(srv.Client(), retry.Policy{HedgeDelay: retry.Constant(20 * time.Millisecond)})
		resp, err := client.Get(srv.URL)
		require.NoError(t, err, "status %d", status)
		require.NotNil(t, resp)
		assert.Equal(t, status, resp.StatusCode)
		assert.Equal(t, "the answer", readAll(t, resp))
		assert.Equal(t, 2, retry.AttemptFrom(resp.Request.Context()), "the hedge's response")
	}
}

// keyServer behaves as the idempotency-key draft says: a request whose key
// is still being processed is answered 409 Conflict; the original completes
// and is the one effect.
type keyServer struct {
	mu       sync.Mutex
	inFlight map[string]bool
	done     map[string]int
	requests int
	conflict int
}

func (s *keyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.requests++
	if s.inFlight[key] {
		s.conflict++
		s.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		return
	}
	s.inFlight[key] = true
	s.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // slower than the hedge delay
	s.mu.Lock()
	delete(s.inFlight, key)
	s.done[key]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// A keyed POST is retried but never hedged: against a server that refuses
// a key still in flight, a hedging policy sends one request, and the
// original completes.
func TestKeyedRequestNotHedged(t *testing.T) {
	t.Parallel()
	ks := &keyServer{inFlight: map[string]bool{}, done: map[string]int{}}
	srv := httptest.NewServer(ks)
	t.Cleanup(srv.Close)
	client := retryhttp.NewClient(srv.Client(), retry.Policy{HedgeDelay: retry.Constant(5 * time.Millisecond)})
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("charge"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	assert.Equal(t, 1, ks.requests, "one request: a keyed request is not hedged")
	assert.Zero(t, ks.conflict)
	assert.Equal(t, 1, ks.done["k-1"])
}

// The seams of a hedged request: the Budget must grant each hedge, the
// Limiter paces it, and the caller's deadline bounds it. With an empty
// budget the hedge is refused and the call goes on with its first attempt;
// with a limiter whose next slot comes after the first answer, no hedge is
// sent and the booking is given back; with a deadline too near for a hedge
// to be useful, none starts.
func TestHedgedRequestSeams(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(800 * time.Millisecond) // slower than the hedge delay
		io.WriteString(w, "ok")
	})
	tests := []struct {
		name   string
		policy retry.Policy
		ctx    func() (context.Context, context.CancelFunc)
	}{
		{"empty budget", retry.Policy{Budget: retry.NewBudget(0.1, 0)}, nil},
		{"limiter's next slot after the answer", retry.Policy{Limiter: retry.RateLimiter(rate.NewLimiter(1, 1))}, nil},
		{"deadline too near", retry.Policy{MinAttemptTime: time.Second},
			func() (context.Context, context.CancelFunc) {
				// The first attempt has its second; a hedge at 600ms would not.
				return context.WithTimeout(context.Background(), 1500*time.Millisecond)
			}},
	}
	for _, tt := range tests {
		n.Store(0)
		p := tt.policy
		p.HedgeDelay = retry.Constant(600 * time.Millisecond)
		client := retryhttp.NewClient(srv.Client(), p)
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tt.ctx != nil {
			ctx, cancel = tt.ctx()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err, tt.name)
		assert.Equal(t, "ok", readAll(t, resp), tt.name)
		cancel()
		time.Sleep(500 * time.Millisecond) // a late hedge would reach the server by now
		assert.Equal(t, int32(1), n.Load(), "%s: requests the server saw", tt.name)
	}
}
