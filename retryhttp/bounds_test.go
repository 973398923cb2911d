package retryhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/faults"
	"github.com/seed93a044d1/retry/retryhttp"
)

// The tests of this file run on loopback in real time: httptest servers
// cannot run inside a synctest bubble. Their bounds on time are generous,
// and the facts they check (counts at the server, slots given back, the
// reason of a stop) do not depend on the machine's speed.

// gauge counts what is in flight at once, and the most seen.
type gauge struct{ now, peak atomic.Int64 }

func (g *gauge) enter() int64 {
	n := g.now.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	return n
}

func (g *gauge) leave() { g.now.Add(-1) }

// retryErrorOf returns the *retry.Error in err, failing the test if there is
// none.
func retryErrorOf(t *testing.T, err error) *retry.Error {
	t.Helper()
	var re *retry.Error
	require.True(t, errors.As(err, &re), "want a *retry.Error in %v", err)
	return re
}

// Many requests through one client, sharing a ConcurrencyLimit and each
// failing once with a 503 before it succeeds, never put more requests in
// the server's handler at once than the limit's slots, and every slot comes
// back. The first requests to reach the handler wait there until all the
// slots are taken, so the limit is used whole whatever the machine's
// speed, and the check of the peak is one that a broken bound would fail.
func TestConcurrencyLimitBoundsTheServerWithRetries(t *testing.T) {
	t.Parallel()
	const slots, callers, each = 4, 24, 3
	lim := &retry.ConcurrencyLimit{Slots: slots}
	var g gauge
	var arrived atomic.Int64
	full := make(chan struct{})
	var fullOnce sync.Once
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		// The count leaves before the handler returns, and so before the
		// client can read a byte of the answer, which net/http sends once
		// the handler is done: the client cannot start the next attempt
		// while this one is still counted.
		defer g.leave()
		if g.enter() == slots {
			fullOnce.Do(func() { close(full) })
		}
		if arrived.Add(1) <= slots {
			select {
			case <-full:
			case <-time.After(10 * time.Second):
				t.Error("the first requests never had every slot at once")
			}
		}
		time.Sleep(time.Millisecond)
		if r.Header.Get("Retry-Attempt") == "" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	client := (&retryhttp.Transport{
		Policy:        retry.Policy{Backoff: retry.Constant(0), Concurrency: lim},
		AttemptHeader: "Retry-Attempt",
	}).Client(srv.Client())

	var wg sync.WaitGroup
	var ok atomic.Int64
	for range callers {
		wg.Go(func() {
			for range each {
				resp, err := client.Get(srv.URL)
				if !assert.NoError(t, err) {
					return
				}
				if b, _ := io.ReadAll(resp.Body); resp.StatusCode == http.StatusOK && string(b) == "ok" {
					ok.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(callers*each), ok.Load(), "every request succeeded on its retry")
	assert.Equal(t, int64(2*callers*each), arrived.Load(), "two attempts per request reached the server")
	assert.Equal(t, int64(slots), g.peak.Load(), "requests in the server's handler at once, at most")
	assert.Zero(t, lim.InFlight(), "every slot given back")
	assert.Zero(t, lim.Waiting(), "no one left waiting")
}

// Hedged requests sharing a ConcurrencyLimit: a hedge is an attempt and
// holds a slot, so the attempts in flight never exceed the slots, at the
// client's wire or in the server's handler, and a hedge that finds no free
// slot does not start, the request going on with its first attempt.
//
// Each first attempt's answer is held back on its way to the client, after
// the server's handler has returned: its hedge, answered at once, wins, and
// the first attempt is cancelled while no handler of it runs. (A loser
// cancelled while the server still works on it gives its slot back as the
// client's attempt ends; the server may then be working on more requests
// than the slots for as long as it takes to notice the cancellation: see
// the package documentation.)
func TestConcurrencyLimitBoundsTheServerWithHedges(t *testing.T) {
	t.Parallel()
	const slots, callers, each = 4, 3, 8 // 3 callers hedging could have 6 attempts in flight
	const held = 500 * time.Millisecond  // how long a first answer is held back, unless cancelled
	lim := &retry.ConcurrencyLimit{Slots: slots}
	var atServer, atWire gauge
	var hedges atomic.Int64
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		defer atServer.leave() // before the answer leaves: see the test above
		atServer.enter()
		if r.Header.Get("Retry-Attempt") != "" {
			hedges.Add(1)
		}
		time.Sleep(2 * time.Millisecond)
		io.WriteString(w, "attempt "+r.Header.Get("Retry-Attempt"))
	})
	base := srv.Client().Transport
	wire := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		atWire.enter()
		defer atWire.leave()
		resp, err := base.RoundTrip(r)
		if err != nil || retry.AttemptFrom(r.Context()) != 1 {
			return resp, err
		}
		select {
		case <-time.After(held):
			return resp, nil
		case <-r.Context().Done():
			resp.Body.Close()
			return nil, r.Context().Err()
		}
	})
	client := (&retryhttp.Transport{
		Policy: retry.Policy{
			HedgeDelay:  retry.Constant(10 * time.Millisecond),
			Concurrency: lim,
		},
		AttemptHeader: "Retry-Attempt",
	}).Client(&http.Client{Transport: wire})

	var wg sync.WaitGroup
	var ok atomic.Int64
	for range callers {
		wg.Go(func() {
			for range each {
				resp, err := client.Get(srv.URL)
				if !assert.NoError(t, err) {
					return
				}
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
				readAll(t, resp)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(callers*each), ok.Load(), "every request succeeded, hedged or not")
	assert.Positive(t, hedges.Load(), "the first hedge due finds a free slot")
	assert.LessOrEqual(t, atWire.peak.Load(), int64(slots), "attempts in flight at the client's wire")
	assert.LessOrEqual(t, atServer.peak.Load(), int64(slots), "requests in the server's handler")
	assert.Zero(t, lim.InFlight(), "every slot given back")
	assert.Zero(t, lim.Waiting(), "no one left waiting")
}

// A slot is held until the response headers arrive, not while the body is
// read: RoundTrip's attempt ends when the headers do, and the core gives
// the slot back then. With one slot, a second request goes through while
// the first one's body is still streaming, and the first body is then read
// whole.
func TestConcurrencySlotHeldUntilHeadersNotBody(t *testing.T) {
	t.Parallel()
	lim := &retry.ConcurrencyLimit{Slots: 1, Queue: -1} // no wait: a second request without a free slot fails at once
	rest := make(chan struct{})
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quick" {
			io.WriteString(w, "quick")
			return
		}
		io.WriteString(w, "head,")
		w.(http.Flusher).Flush()
		select {
		case <-rest:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "tail")
	})
	client := retryhttp.NewClient(srv.Client(), retry.Policy{Concurrency: lim})

	slow, err := client.Get(srv.URL + "/slow")
	require.NoError(t, err)
	defer slow.Body.Close()
	assert.Zero(t, lim.InFlight(), "the slot came back with the headers, the body unread")

	quick, err := client.Get(srv.URL + "/quick")
	require.NoError(t, err, "the one slot is free while the first body streams")
	assert.Equal(t, "quick", readAll(t, quick))

	close(rest)
	assert.Equal(t, "head,tail", readAll(t, slow), "the body outside the slot is read whole")
	assert.Zero(t, lim.InFlight())
}

// A CircuitBreaker in a Transport's policy opens on the failures the
// classifier retries (503s, connection resets) and on nothing else (a 404
// or a 400 says nothing of the server's health); once open, a request
// fails at once, reaching no server, with a *retry.Error whose Reason Is
// retry.ErrBreakerOpen.
func TestBreakerOpensOnFailuresOnly(t *testing.T) {
	t.Parallel()
	statusServer := func(code int) func(t *testing.T) (string, func() int) {
		return func(t *testing.T) (string, func() int) {
			var n atomic.Int64
			srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				http.Error(w, http.StatusText(code), code)
			})
			return srv.URL, func() int { return int(n.Load()) }
		}
	}
	tests := []struct {
		name   string
		server func(t *testing.T) (url string, reached func() int)
		opens  bool
	}{
		{"503", statusServer(http.StatusServiceUnavailable), true},
		{"reset", func(t *testing.T) (string, func() int) {
			s := faults.HTTP1(faults.H1ResetAfterRequest) // raw TCP: reads the request, then a RST
			t.Cleanup(s.Close)
			return s.URL(), func() int { return len(s.Requests()) }
		}, true},
		{"404", statusServer(http.StatusNotFound), false},
		{"400", statusServer(http.StatusBadRequest), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, reached := tt.server(t)
			cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Hour}
			client := retryhttp.NewClient(nil, retry.Policy{MaxAttempts: 1, Breaker: cb})
			defer client.CloseIdleConnections()
			for range 5 {
				resp, err := client.Get(url)
				if err == nil {
					resp.Body.Close()
				}
				if cb.State(time.Now()) == "open" {
					break
				}
			}
			if !tt.opens {
				assert.Equal(t, 5, reached(), "every request reached the server")
				assert.Equal(t, "closed", cb.State(time.Now()), "a %s says nothing of the server's health", tt.name)
				return
			}
			require.Equal(t, "open", cb.State(time.Now()), "three failures in a row open it")
			require.Equal(t, 3, reached())

			start := time.Now()
			resp, err := client.Get(url)
			took := time.Since(start)
			require.Error(t, err)
			assert.Nil(t, resp)
			re := retryErrorOf(t, err)
			assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
			assert.ErrorIs(t, err, retry.ErrBreakerOpen, "through the *url.Error too")
			var until interface{ Until() time.Time }
			require.True(t, errors.As(re.Reason, &until), "the Reason says until when")
			assert.WithinDuration(t, start.Add(time.Hour), until.Until(), time.Minute)
			assert.Zero(t, re.Attempts, "no attempt made")
			assert.Equal(t, 3, reached(), "no request reached the server")
			assert.Less(t, took, 5*time.Second, "it failed at once: took %v", took)
		})
	}
}

// Once the breaker's OpenFor has passed, the next request is a probe that
// reaches the server; its success closes the breaker.
func TestBreakerProbeAfterOpenFor(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	cb := &retry.CircuitBreaker{Failures: 2, OpenFor: 200 * time.Millisecond}
	client := retryhttp.NewClient(srv.Client(), retry.Policy{MaxAttempts: 1, Breaker: cb})
	for range 2 {
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		resp.Body.Close()
	}
	_, err := client.Get(srv.URL)
	require.ErrorIs(t, err, retry.ErrBreakerOpen)
	require.Equal(t, int64(2), n.Load())
	var until interface{ Until() time.Time }
	require.True(t, errors.As(retryErrorOf(t, err).Reason, &until))
	time.Sleep(time.Until(until.Until()) + 10*time.Millisecond)

	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	assert.Equal(t, "ok", readAll(t, resp))
	assert.Equal(t, int64(3), n.Load(), "the probe reached the server")
	assert.Equal(t, "closed", cb.State(time.Now()), "its success closed the breaker")
}

// A retrying request that the breaker stops after a 503 follows the rule
// for a stop after a response, in both of its forms.
//
// When the 503 itself opens the breaker, the loop knows at once that the
// retry would be refused, and stops on the response: RoundTrip returns the
// 503, body unread, and a nil error; retry.CheckResponse on it, in a loop
// around the client, gives an error that stops that loop too, with the
// breaker's reason.
//
// When the breaker opens during the wait before the retry (another request
// opened it), the 503 has been drained already, to free its connection
// for the wait: RoundTrip returns a *retry.Error whose Reason Is
// ErrBreakerOpen and whose Last is the 503's *retry.ResponseError.
func TestBreakerStopsARetryingRequest(t *testing.T) {
	t.Parallel()
	t.Run("opened by the response", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int64
		srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
		})
		cb := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Hour}
		var events []retry.Event
		client := retryhttp.NewClient(srv.Client(), retry.Policy{
			Backoff: retry.Constant(0), Breaker: cb,
			Observe: func(_ context.Context, e retry.Event) { events = append(events, e) },
		})
		resp, err := client.Get(srv.URL)
		require.NoError(t, err, "a stop on a response returns the response")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "busy\n", readAll(t, resp), "body unread until now")
		assert.Equal(t, int64(1), n.Load(), "no retry was sent")
		require.NotEmpty(t, events)
		assert.ErrorIs(t, events[len(events)-1].Reason, retry.ErrBreakerOpen, "the call's reason")

		outer := 0
		err = retry.Do(t.Context(), func(context.Context) error {
			outer++
			resp, err := client.Get(srv.URL)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return retry.CheckResponse(resp)
		}, retry.Policy{Backoff: retry.Constant(0)})
		assert.Equal(t, 1, outer, "a loop around the client does not retry the refusal")
		assert.ErrorIs(t, retryErrorOf(t, err).Reason, retry.ErrBreakerOpen)
	})
	t.Run("opened during the wait", func(t *testing.T) {
		t.Parallel()
		srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		})
		cb := &retry.CircuitBreaker{Failures: 2, OpenFor: time.Hour}
		tr := &tracker{base: srv.Client().Transport}
		client := retryhttp.NewClient(&http.Client{Transport: tr}, retry.Policy{
			Backoff: retry.Constant(0), Breaker: cb,
			Observe: func(_ context.Context, e retry.Event) {
				if e.Attempt == 1 && e.Retry {
					// Another request fails as this one waits for its retry,
					// and the breaker opens.
					done, _ := cb.Allow(time.Now())
					done(time.Now(), errors.New("another request failed"))
				}
			},
		})
		resp, err := client.Get(srv.URL)
		assert.Nil(t, resp)
		re := retryErrorOf(t, err)
		assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
		var last *retry.ResponseError
		require.True(t, errors.As(re.Last, &last), "Last is the 503: %v", re.Last)
		assert.Equal(t, http.StatusServiceUnavailable, last.StatusCode)
		assert.Equal(t, 1, tr.Calls(), "no retry was sent")
		for _, b := range tr.Bodies() {
			assert.True(t, b.closed.Load(), "the 503 was drained and closed")
		}
		assertOuterLoopStops(t, err, retry.ErrBreakerOpen)
	})
}

// assertOuterLoopStops checks that a retry loop around the client, given
// err, stops at once with reason: the client's loop has not spent its
// attempts, and its reason holds for the outer loop too.
func assertOuterLoopStops(t *testing.T, err, reason error) {
	t.Helper()
	calls := 0
	outer := retry.Do(t.Context(), func(context.Context) error { calls++; return err },
		retry.Policy{Backoff: retry.Constant(0)})
	assert.Equal(t, 1, calls, "the outer loop retried %v", err)
	assert.ErrorIs(t, retryErrorOf(t, outer).Reason, reason)
}

// A retry that finds no slot stops the request with ErrNoSlot. Slots are
// taken after the wait, when the 503 has been drained already: RoundTrip
// returns a *retry.Error whose Reason Is ErrNoSlot and whose Last is the
// 503, as for any stop during a wait.
func TestNoSlotForARetry(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	lim := &retry.ConcurrencyLimit{Slots: 1, Queue: -1}
	var hold func(time.Duration, error)
	client := retryhttp.NewClient(srv.Client(), retry.Policy{
		Backoff: retry.Constant(0), Concurrency: lim,
		Observe: func(_ context.Context, e retry.Event) {
			if e.Attempt == 1 && e.Retry {
				// Another request takes the slot as this one waits.
				var err error
				hold, err = lim.Acquire(context.Background(), time.Time{})
				require.NoError(t, err)
			}
		},
	})
	resp, err := client.Get(srv.URL)
	assert.Nil(t, resp)
	re := retryErrorOf(t, err)
	assert.ErrorIs(t, re.Reason, retry.ErrNoSlot)
	var last *retry.ResponseError
	require.True(t, errors.As(re.Last, &last), "Last is the 503: %v", re.Last)
	assert.Equal(t, http.StatusServiceUnavailable, last.StatusCode)
	assert.Equal(t, int64(1), n.Load(), "no retry was sent")
	assertOuterLoopStops(t, err, retry.ErrNoSlot)
	require.NotNil(t, hold)
	assert.Equal(t, 1, lim.InFlight(), "only the other request's slot is taken")
	hold(0, nil)
	assert.Zero(t, lim.InFlight())
}

// A request whose deadline comes while it waits for a slot returns
// promptly, with a *retry.Error whose Reason is ErrNoSlot (it could no
// longer start MinAttemptTime before its deadline) or the deadline itself,
// never reaching the server, and leaves no waiter behind. A full queue
// refuses at once.
func TestDeadlineWhileWaitingForASlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration
		minTime time.Duration
		queue   int
		others  int           // requests already waiting for the slot
		want    error         // the Reason; nil for ErrNoSlot or the deadline
		within  time.Duration // when it returns at the latest, before slack
	}{
		{name: "deadline", timeout: 200 * time.Millisecond, within: 200 * time.Millisecond},
		{name: "MinAttemptTime", timeout: 400 * time.Millisecond, minTime: 300 * time.Millisecond, want: retry.ErrNoSlot, within: 100 * time.Millisecond},
		{name: "queue full", timeout: time.Hour, queue: 1, others: 1, want: retry.ErrNoSlot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			unblock := make(chan struct{})
			srv := newServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if r.URL.Path == "/block" {
					select {
					case <-unblock:
					case <-r.Context().Done():
					}
				}
			})
			lim := &retry.ConcurrencyLimit{Slots: 1, Queue: tt.queue}
			client := retryhttp.NewClient(srv.Client(), retry.Policy{Concurrency: lim, MinAttemptTime: tt.minTime})

			blocked := make(chan error, 1+tt.others)
			go func() {
				resp, err := client.Get(srv.URL + "/block") // holds the slot until unblocked
				if err == nil {
					resp.Body.Close()
				}
				blocked <- err
			}()
			require.Eventually(t, func() bool { return n.Load() == 1 }, 10*time.Second, time.Millisecond)
			for range tt.others {
				go func() {
					resp, err := client.Get(srv.URL + "/block")
					if err == nil {
						resp.Body.Close()
					}
					blocked <- err
				}()
			}
			require.Eventually(t, func() bool { return lim.Waiting() == tt.others }, 10*time.Second, time.Millisecond)

			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/waits", nil)
			require.NoError(t, err)
			start := time.Now()
			resp, err := client.Do(req)
			took := time.Since(start)
			assert.Nil(t, resp)
			re := retryErrorOf(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, re.Reason, tt.want)
			} else {
				assert.True(t, errors.Is(re.Reason, retry.ErrNoSlot) || errors.Is(re.Reason, context.DeadlineExceeded),
					"Reason %v, want ErrNoSlot or the deadline", re.Reason)
			}
			assert.Zero(t, re.Attempts, "no attempt made")
			assert.Less(t, took, tt.within+5*time.Second, "took %v: it returned promptly", took)
			assert.Equal(t, int64(1), n.Load(), "only the request holding the slot reached the server")
			assert.Equal(t, tt.others, lim.Waiting(), "it left no waiter behind")

			close(unblock)
			for range 1 + tt.others {
				assert.NoError(t, <-blocked)
			}
			assert.Zero(t, lim.InFlight(), "every slot given back")
			assert.Zero(t, lim.Waiting())
		})
	}
}
