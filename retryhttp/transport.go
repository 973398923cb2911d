package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/seed93a044d1/retry"
)

// Transport is an [http.RoundTripper] that sends a request again, with the
// retry loop of [retry.Do], when the request is safe to repeat and an
// attempt fails in a way the policy retries.
//
// The zero value is ready to use: it sends through [http.DefaultTransport],
// retries the requests [DefaultRetryable] accepts with the zero
// [retry.Policy] (4 attempts, 100ms exponential backoff with full jitter),
// and adds no header. A Transport is safe for concurrent use by multiple
// goroutines as long as its Base, the funcs and the Budget in its Policy are;
// do not change its fields once it is in use.
//
// RoundTrip stops as [retry.Do] does: when the request's context ends, the
// error or status is not retried, no attempts are left, the budget refuses,
// or the server's delay is above the ceiling or would pass the deadline.
// See the package documentation for what it returns then.
type Transport struct {
	// Base sends each attempt. nil means http.DefaultTransport.
	Base http.RoundTripper

	// Policy says how many attempts to make, how long to wait between them
	// and which failures to retry; the zero Policy is retry's default. Its
	// AttemptTimeout bounds each attempt until the response headers arrive,
	// never the body of the response returned. Its OnRetry, if set, is
	// called after the discarded response has been closed, before the wait.
	Policy retry.Policy

	// Retryable reports whether a request is safe to send more than once.
	// nil means DefaultRetryable. When set, it replaces that rule: opt POST
	// in with
	//
	//	func(r *http.Request) bool { return retryhttp.DefaultRetryable(r) || r.Method == http.MethodPost }
	//
	// Whatever it says, a CONNECT request, or one whose body cannot be
	// replayed (Body set, GetBody nil), is sent once.
	Retryable func(*http.Request) bool

	// AttemptHeader, when not empty, is the name of a header that carries
	// the 1-based attempt number ("2", "3", ...) on every retry. The first
	// attempt is sent without it, and the caller's request is never changed:
	// each retry sends a copy. Empty means no header.
	AttemptHeader string
}

// NewClient returns a copy of base whose Transport is a [Transport] that
// retries with p and sends each attempt through base's Transport. A nil base
// means a zero [http.Client] (so http.DefaultTransport, no timeout). base
// itself is not changed. The client's Timeout, if any, bounds all attempts
// and the waits between them together.
func NewClient(base *http.Client, p retry.Policy) *http.Client {
	var c http.Client
	if base != nil {
		c = *base
	}
	c.Transport = &Transport{Base: c.Transport, Policy: p}
	return &c
}

// DefaultRetryable reports whether req is safe to send more than once by
// default: its method is one RFC 9110 calls idempotent (GET, the empty
// method, HEAD, OPTIONS, TRACE, PUT, DELETE), or it carries a non-empty
// Idempotency-Key or X-Idempotency-Key header. Methods are case-sensitive,
// as in net/http. It does not look at the body: [Transport] checks that
// separately. A nil req is not retryable.
func DefaultRetryable(req *http.Request) bool {
	if req == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// RoundTrip sends req, and sends it again while the policy says so if req is
// safe to repeat; see [Transport] and the package documentation. It never
// modifies req: retries send copies, with a fresh body from GetBody.
//
// A request that is not retried goes to Base once, and its response and
// error come back unchanged. Otherwise RoundTrip returns a response and a nil
// error, or a nil response and a [*retry.Error].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !t.retries(req) {
		return base.RoundTrip(req)
	}

	c := &call{t: t, base: base, req: req, policy: t.Policy}
	// The core's AttemptTimeout would end the attempt's context when the
	// attempt returns, cutting the body of the response handed back: the
	// call bounds each attempt itself, until the headers arrive.
	c.timeout = c.policy.AttemptTimeout
	c.policy.AttemptTimeout = 0
	c.onRetry = c.policy.OnRetry
	c.policy.OnRetry = c.discardHeld

	ctx := req.Context()
	err := retry.Do(ctx, c.attempt, &c.policy)
	if err == nil {
		return c.resp, nil
	}
	if c.attempts == 0 && req.Body != nil {
		// No attempt was made; a RoundTripper closes the body all the same.
		req.Body.Close()
	}
	if c.held == nil {
		return nil, err
	}
	if ended(ctx) {
		// Its body can no longer be read: the context it was read under
		// has ended. Say so with the context's cause.
		if c.held.Body != nil {
			c.held.Body.Close()
		}
		var re *retry.Error
		if errors.As(err, &re) {
			re.Reason = cause(ctx)
		}
		return nil, err
	}
	return c.held, nil
}

// CloseIdleConnections closes the idle connections of Base, if it has a
// CloseIdleConnections method, as [http.Client.CloseIdleConnections] expects.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if ci, ok := base.(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// retries reports whether req may be sent more than once.
func (t *Transport) retries(req *http.Request) bool {
	if req == nil || req.URL == nil || req.Method == http.MethodConnect {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false // replaying it would mean buffering it
	}
	if t.Retryable != nil {
		return t.Retryable(req)
	}
	return DefaultRetryable(req)
}

// call is the state of one retried RoundTrip. Its methods run on the
// goroutine that called RoundTrip, inside retry.Do.
type call struct {
	t       *Transport
	base    http.RoundTripper
	req     *http.Request
	policy  retry.Policy // the Transport's, with the hooks below
	timeout time.Duration
	onRetry func(retry.RetryEvent) // the user's

	attempts int
	resp     *http.Response // the response of the attempt that succeeded
	held     *http.Response // the response of the attempt that failed last
	heldBy   *guard         // held's guard, if the attempt had a timeout
}

// attempt sends one attempt; retry.Do calls it with the request's context.
func (c *call) attempt(ctx context.Context) error {
	c.attempts++
	var body io.ReadCloser
	if c.attempts > 1 {
		if b := c.req.Body; b != nil && b != http.NoBody {
			var err error
			if body, err = c.req.GetBody(); err != nil {
				return retry.Permanent(err)
			}
		}
	}

	var g *guard
	if c.timeout > 0 {
		// When the caller's deadline comes first, it alone bounds the
		// attempt, and its error is the caller's, as in the core.
		if d, ok := ctx.Deadline(); !ok || c.timeout < time.Until(d) {
			g = newGuard(ctx, c.timeout)
			ctx = g.ctx
		}
	}

	r := c.req
	if c.attempts > 1 || g != nil {
		r = c.req.WithContext(ctx) // a shallow copy: req stays as it is
	}
	if c.attempts > 1 {
		if body != nil {
			r.Body = body
		}
		if name := c.t.AttemptHeader; name != "" {
			h := c.req.Header.Clone()
			if h == nil {
				h = make(http.Header, 1)
			}
			h.Set(name, strconv.Itoa(c.attempts))
			r.Header = h
		}
	}

	resp, err := c.base.RoundTrip(r)
	if g != nil {
		resp, err = g.settle(resp, err)
	}
	if err != nil {
		if resp != nil && resp.Body != nil {
			resp.Body.Close() // a RoundTripper returns one or the other
		}
		return err
	}
	if err := retry.CheckResponse(resp); err != nil {
		c.held, c.heldBy = resp, g
		return err
	}
	c.resp = resp
	return nil
}

// discardHeld is the policy's OnRetry: a retry will happen, so the held
// response is drained and closed before the wait, and its connection goes
// back to the pool. Then the user's OnRetry runs.
func (c *call) discardHeld(ev retry.RetryEvent) {
	if c.held != nil {
		discard(c.held, c.heldBy, c.timeout)
		c.held, c.heldBy = nil, nil
	}
	if c.onRetry != nil {
		c.onRetry(ev)
	}
}

// maxDrain is the most of a discarded body read to keep its connection: a
// longer body costs more to read than a new connection does.
const maxDrain = 64 << 10

// discard drains and closes a response that will not be returned. A drain
// is bounded by the request's context and, if g is set, by timeout again.
func discard(resp *http.Response, g *guard, timeout time.Duration) {
	if resp.Body == nil {
		return
	}
	if resp.ContentLength <= maxDrain { // -1, unknown, included
		if g != nil && g.body != nil { // the body is the guard's
			g.timer.Reset(timeout)
		}
		io.CopyN(io.Discard, resp.Body, maxDrain)
	}
	resp.Body.Close()
}

// ended reports whether ctx is done or its deadline has come, as the core
// judges it.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// cause returns why ctx ended; DeadlineExceeded if its deadline has come but
// its timer has not fired yet.
func cause(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return context.DeadlineExceeded
}
