package retryhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// The tests in this file pin timing exactly, in testing/synctest bubbles.
// A bubble cannot hold real network connections, so their Base is a fake
// that fabricates responses; every other test talks to a real server.

// fake is a Base that answers attempt n (1-based) with answer(n, req), and
// records when each attempt started and the context it ran under.
type fake struct {
	start  time.Time
	answer func(n int, r *http.Request) (*http.Response, error)
	starts []time.Duration
	ctxs   []context.Context
}

func newFake(answer func(n int, r *http.Request) (*http.Response, error)) *fake {
	return &fake{start: time.Now(), answer: answer}
}

func (f *fake) RoundTrip(r *http.Request) (*http.Response, error) {
	f.starts = append(f.starts, time.Since(f.start))
	f.ctxs = append(f.ctxs, r.Context())
	return f.answer(len(f.starts), r)
}

// respond fabricates a response with the given status, headers and body.
func respond(r *http.Request, status int, header map[string]string, body io.ReadCloser) *http.Response {
	h := make(http.Header)
	for k, v := range header {
		h.Set(k, v)
	}
	return &http.Response{
		StatusCode:    status,
		Status:        http.StatusText(status),
		Header:        h,
		Body:          body,
		ContentLength: -1,
		Request:       r,
	}
}

func text(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// get sends a GET through rt with ctx.
func get(t *testing.T, ctx context.Context, rt http.RoundTripper) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
	require.NoError(t, err)
	return rt.RoundTrip(req)
}

func TestRoundTripWaitsExactlyForServerDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		header  func() map[string]string // called inside the bubble, for dates
		backoff retry.Backoff
		want    time.Duration // start of the second attempt
	}{
		{name: "Retry-After seconds", want: time.Second,
			header: func() map[string]string { return map[string]string{"Retry-After": "1"} }},
		{name: "Retry-After date", want: 3 * time.Second,
			header: func() map[string]string {
				return map[string]string{"Retry-After": time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)}
			}},
		{name: "retry-after-ms", want: 1500 * time.Millisecond,
			header: func() map[string]string { return map[string]string{"Retry-After-Ms": "1500"} }},
		{name: "x-ms-retry-after-ms", want: 250 * time.Millisecond,
			header: func() map[string]string { return map[string]string{"X-Ms-Retry-After-Ms": "250"} }},
		{name: "backoff longer than the server's delay", backoff: retry.Constant(2 * time.Second), want: 2 * time.Second,
			header: func() map[string]string { return map[string]string{"Retry-After": "1"} }},
		{name: "default backoff below the server's delay", want: time.Second,
			header: func() map[string]string { return map[string]string{"Retry-After": "1"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFake(func(n int, r *http.Request) (*http.Response, error) {
					if n == 1 {
						return respond(r, 503, tt.header(), text("busy")), nil
					}
					return respond(r, 200, nil, text("ok")), nil
				})
				backoff := tt.backoff
				if backoff == nil {
					backoff = retry.Exponential{} // waits below 100ms before the first retry
				}
				rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: backoff}}

				resp, err := get(t, t.Context(), rt)
				require.NoError(t, err)
				assert.Equal(t, "ok", readAll(t, resp))
				assert.Equal(t, []time.Duration{0, tt.want}, f.starts)
			})
		})
	}
}

// A server delay the policy will not honour ends the call at once, with the
// server's response.
func TestRoundTripReturnsAtOnceOnServerDelayItWillNotHonour(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		header   map[string]string
		policy   retry.Policy
		deadline time.Duration // of the request's context; 0 for none
	}{
		{name: "above the default ceiling of 5m", header: map[string]string{"Retry-After": "301"}},
		{name: "above MaxRetryAfter", header: map[string]string{"Retry-After": "11"},
			policy: retry.Policy{MaxRetryAfter: 10 * time.Second}},
		{name: "ends at the deadline", header: map[string]string{"Retry-After": "10"}, deadline: 10 * time.Second},
		{name: "past the deadline", header: map[string]string{"Retry-After-Ms": "10001"}, deadline: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				f := newFake(func(n int, r *http.Request) (*http.Response, error) {
					return respond(r, 503, tt.header, text("come back later")), nil
				})
				rt := &retryhttp.Transport{Base: f, Policy: tt.policy}
				start := time.Now()

				resp, err := get(t, ctx, rt)
				require.NoError(t, err)
				assert.Zero(t, time.Since(start), "time until RoundTrip returned")
				assert.Equal(t, 503, resp.StatusCode)
				assert.Equal(t, "come back later", readAll(t, resp))
				assert.Len(t, f.starts, 1)
			})
		})
	}
}

func TestRoundTripRetriesWhenServerDelayFitsBeforeDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		f := newFake(func(n int, r *http.Request) (*http.Response, error) {
			if n == 1 {
				return respond(r, 503, map[string]string{"Retry-After-Ms": "9999"}, text("busy")), nil
			}
			return respond(r, 200, nil, text("ok")), nil
		})
		rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: retry.Constant(0)}}

		resp, err := get(t, ctx, rt)
		require.NoError(t, err)
		assert.Equal(t, "ok", readAll(t, resp))
		assert.Equal(t, []time.Duration{0, 9999 * time.Millisecond}, f.starts)
	})
}

// When the attempts run out on a retryable status, the last response comes
// back, after exactly the waits the server asked for.
func TestRoundTripReturnsLastResponseAfterServerDelays(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFake(func(n int, r *http.Request) (*http.Response, error) {
			return respond(r, 503, map[string]string{"Retry-After": "2"}, text("busy "+string(rune('0'+n)))), nil
		})
		rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}}
		start := time.Now()

		resp, err := get(t, t.Context(), rt)
		require.NoError(t, err)
		assert.Equal(t, 4*time.Second, time.Since(start))
		assert.Equal(t, "busy 3", readAll(t, resp))
		assert.Equal(t, []time.Duration{0, 2 * time.Second, 4 * time.Second}, f.starts)
	})
}

// slowBody gives its data after a delay, or the context's error if the
// context ended by then, as a body read from the network does.
type slowBody struct {
	ctx   context.Context
	delay time.Duration
	data  io.Reader
	slept bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if !b.slept {
		b.slept = true
		time.Sleep(b.delay)
	}
	if err := b.ctx.Err(); err != nil {
		return 0, context.Cause(b.ctx)
	}
	return b.data.Read(p)
}

func (b *slowBody) Close() error { return nil }

// AttemptTimeout abandons an attempt whose headers are late, at exactly the
// timeout, and never cuts the body of the response returned, however long
// the caller takes to read it. Base transports report the context's cause
// (net/http does) or its bare error: both are retried.
func TestRoundTripAttemptTimeoutRetriesSlowHeadersOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		baseErr func(ctx context.Context) error
	}{
		{name: "base returns the cause", baseErr: context.Cause},
		{name: "base returns ctx.Err", baseErr: func(ctx context.Context) error { return ctx.Err() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFake(func(n int, r *http.Request) (*http.Response, error) {
					if n == 1 {
						<-r.Context().Done()
						return nil, tt.baseErr(r.Context())
					}
					return respond(r, 200, nil, &slowBody{ctx: r.Context(), delay: 10 * time.Second, data: strings.NewReader("late body")}), nil
				})
				rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: 2 * time.Second}}
				start := time.Now()

				resp, err := get(t, t.Context(), rt)
				require.NoError(t, err)
				assert.Equal(t, []time.Duration{0, 2 * time.Second}, f.starts)
				assert.ErrorIs(t, context.Cause(f.ctxs[0]), context.DeadlineExceeded, "cause of the first attempt's end")

				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				assert.Equal(t, "late body", string(body))
				assert.Equal(t, 12*time.Second, time.Since(start))
				require.NoError(t, resp.Body.Close())
			})
		})
	}
}

// Every attempt's context is released: a failed one's at once, the returned
// one's when the caller closes the body or reads it to the end, and not
// before, however long that takes.
func TestRoundTripAttemptTimeoutReleasesContexts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		finish func(io.ReadCloser) error
	}{
		{name: "Close", finish: func(b io.ReadCloser) error { return b.Close() }},
		{name: "read to EOF", finish: func(b io.ReadCloser) error { _, err := io.ReadAll(b); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFake(func(n int, r *http.Request) (*http.Response, error) {
					switch n {
					case 1:
						return respond(r, 503, nil, text("busy")), nil
					case 2:
						return nil, syscall.ECONNRESET
					}
					return respond(r, 200, nil, text("ok")), nil
				})
				rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: time.Second}}

				resp, err := get(t, t.Context(), rt)
				require.NoError(t, err)
				require.Len(t, f.ctxs, 3)
				assert.Error(t, f.ctxs[0].Err(), "discarded response's context")
				assert.Error(t, f.ctxs[1].Err(), "failed attempt's context")
				time.Sleep(time.Minute)
				assert.NoError(t, f.ctxs[2].Err(), "returned response's context before the body is finished")

				require.NoError(t, tt.finish(resp.Body))
				assert.Error(t, f.ctxs[2].Err(), "returned response's context after the body is finished")
				require.NoError(t, resp.Body.Close())
			})
		})
	}
}

// blockingBody gives nothing until its context ends, as a server that
// stalls mid-body does.
type blockingBody struct {
	ctx    context.Context
	closed bool
}

func (b *blockingBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, context.Cause(b.ctx)
}

func (b *blockingBody) Close() error { b.closed = true; return nil }

// Draining a discarded body that stalls is bounded by AttemptTimeout: the
// retry starts then, not never.
func TestRoundTripDrainBoundedByAttemptTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var stalled *blockingBody
		f := newFake(func(n int, r *http.Request) (*http.Response, error) {
			if n == 1 {
				stalled = &blockingBody{ctx: r.Context()}
				return respond(r, 503, nil, stalled), nil
			}
			return respond(r, 200, nil, text("ok")), nil
		})
		rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: 2 * time.Second}}

		resp, err := get(t, t.Context(), rt)
		require.NoError(t, err)
		assert.Equal(t, "ok", readAll(t, resp))
		assert.Equal(t, []time.Duration{0, 2 * time.Second}, f.starts)
		assert.True(t, stalled.closed, "stalled body closed")
	})
}

// When the caller's deadline comes before AttemptTimeout, it alone bounds
// the attempt, and the call stops with the caller's error, as in the core.
func TestRoundTripCallerDeadlineBeforeAttemptTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		f := newFake(func(n int, r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, context.Cause(r.Context())
		})
		rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{AttemptTimeout: 5 * time.Second}}
		start := time.Now()

		resp, err := get(t, ctx, rt)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 1, re.Attempts)
		assert.Equal(t, time.Second, time.Since(start))
		want, _ := ctx.Deadline()
		got, _ := f.ctxs[0].Deadline()
		assert.Equal(t, want, got, "the attempt ran under a deadline of its own")
	})
}

// A response that arrives as the caller's deadline passes is held when the
// context ends: it is closed, and the context's error returned.
func TestRoundTripDeadlinePassesWhileHoldingResponse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		body := &trackedBody{rc: text("busy")}
		f := newFake(func(n int, r *http.Request) (*http.Response, error) {
			time.Sleep(time.Second)
			return respond(r, 503, nil, body), nil
		})
		rt := &retryhttp.Transport{Base: f, Policy: retry.Policy{Backoff: retry.Constant(0)}}

		resp, err := get(t, ctx, rt)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, errors.Is(err, retry.ErrNoTimeLeft), "reason %v is not the context's", err)
		assert.True(t, body.closed.Load(), "held body closed")
		assert.Len(t, f.starts, 1)
	})
}
