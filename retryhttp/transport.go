package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/handoff"
)

// Transport is an [http.RoundTripper] that sends a request again, with the
// retry loop of [retry.Do], when the request is safe to repeat and an
// attempt fails in a way the policy retries.
//
// The zero value is ready to use: it sends through [http.DefaultTransport],
// retries the requests [DefaultRetryable] accepts with the zero
// [retry.Policy] (4 attempts, 100ms exponential backoff with full jitter),
// adds no header and sets no timeout. A Transport is safe for concurrent use
// by multiple goroutines as long as its Base, the funcs and the Budget in
// its Policy are; do not change its fields once it is in use.
//
// RoundTrip stops as [retry.Do] does: when the request's context ends or
// Timeout passes, the error or status is not retried, no attempts are left,
// the budget refuses, or the server's delay is above the ceiling or would
// pass the deadline. See the package documentation for what it returns
// then.
type Transport struct {
	// Base sends each attempt. nil means http.DefaultTransport.
	Base http.RoundTripper

	// Policy says how many attempts to make, how long to wait between them
	// and which failures to retry; the zero Policy is retry's default. A
	// request's context can carry another policy for that request alone
	// (see WithPolicy). Its AttemptTimeout bounds each attempt until the
	// response headers arrive, never the body of the response returned.
	// Its Observe, if set, sees every attempt after the discarded response
	// has been drained and closed, with a context from which RequestFrom
	// returns the request. Attempts are always numbered (NumberAttempts),
	// so retry.AttemptFrom(resp.Request.Context()) tells which attempt
	// produced a response.
	Policy retry.Policy

	// Retryable reports whether a request is safe to send more than once.
	// nil means DefaultRetryable. When set, it replaces that rule: opt POST
	// in with
	//
	//	func(r *http.Request) bool { return retryhttp.DefaultRetryable(r) || r.Method == http.MethodPost }
	//
	// Whatever it says, a CONNECT request, or one whose body cannot be
	// replayed (Body set, GetBody nil), is sent once. A request sent once is
	// still a call of the policy, with one attempt: see RoundTrip.
	Retryable func(*http.Request) bool

	// AttemptHeader, when not empty, is the name of a header that carries
	// the 1-based attempt number ("2", "3", ...) on every retry. The first
	// attempt is sent without it, and the caller's request is never changed:
	// each retry sends a copy. Empty means no header.
	AttemptHeader string

	// Timeout, when positive, bounds each request sent through the
	// Transport, as http.Client.Timeout does: its attempts, the waits
	// between them, and the reading of the body of the response returned;
	// a redirect continues on the same time. When it passes, RoundTrip
	// returns a *retry.Error (or a body read fails) whose cause is a timeout
	// error that matches context.DeadlineExceeded. 0 means no timeout of
	// its own. Prefer it to http.Client.Timeout, which net/http enforces by
	// replacing the error with one that no longer holds the *retry.Error:
	// NewClient moves a client's Timeout here for that reason.
	Timeout time.Duration
}

// NewClient returns a copy of base whose Transport is a [Transport] that
// retries with p and sends each attempt through base's Transport. A nil base
// means a zero [http.Client] (so http.DefaultTransport, no timeout). base
// itself is not changed. It is shorthand for
//
//	(&retryhttp.Transport{Policy: p}).Client(base)
//
// which is the way to set the Transport's other fields (Retryable,
// AttemptHeader, Timeout).
//
// base's Timeout moves to the Transport (see Transport.Timeout): it still
// bounds all attempts, the waits between them and the reading of the body,
// but the returned client's Timeout is 0, because net/http, when its own
// Timeout passes, replaces the error with one that has lost the
// *retry.Error, its Attempts and its OutcomeUnknown.
func NewClient(base *http.Client, p retry.Policy) *http.Client {
	return (&Transport{Policy: p}).Client(base)
}

// Client returns a copy of base (nil means a zero [http.Client]) that sends
// its requests through a copy of t: every setting of t applies, t's Base
// is base's Transport when t has none, and base's Timeout moves to the
// copy's Timeout when t has none, as [NewClient] does. Neither t nor base is
// changed:
//
//	client := (&retryhttp.Transport{
//		Policy:        policy,
//		Retryable:     func(r *http.Request) bool { return retryhttp.DefaultRetryable(r) || r.URL.Path == "/v1/charges" },
//		AttemptHeader: "Retry-Attempt",
//	}).Client(&http.Client{Timeout: 10 * time.Second})
func (t *Transport) Client(base *http.Client) *http.Client {
	var c http.Client
	if base != nil {
		c = *base
	}
	tr := *t
	if tr.Base == nil {
		tr.Base = c.Transport
	}
	if tr.Timeout <= 0 {
		tr.Timeout = c.Timeout
	}
	c.Transport = &tr
	c.Timeout = 0
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

// WithPolicy returns a copy of ctx that makes a [Transport] retry the
// requests made with it under p instead of its own Policy, so that one
// shared client serves calls with different needs:
//
//	req, _ := http.NewRequestWithContext(retryhttp.WithPolicy(ctx, paymentsPolicy), "PUT", url, body)
//
// Whether a request is retried at all is still the Transport's Retryable's
// decision.
func WithPolicy(ctx context.Context, p retry.Policy) context.Context {
	return context.WithValue(ctx, policyKey{}, &p)
}

type policyKey struct{}

// RequestFrom returns the request that a [Transport] is sending, from the
// context that its Policy's Observe receives, so that a hook shared by every
// request can say which one it sees (its method and URL, say). It returns nil
// for any other context.
func RequestFrom(ctx context.Context) *http.Request {
	req, _ := ctx.Value(requestKey{}).(*http.Request)
	return req
}

type requestKey struct{}

// RoundTrip sends req, and sends it again while the policy says so if req is
// safe to repeat; see [Transport] and the package documentation. It never
// modifies req: retries send copies, with a fresh body from GetBody.
//
// Every request is a call of the policy: its attempts are paced by the
// Limiter, the call deposits in the Budget, and Observe sees it, whether it
// may be retried or not. A request that may not be sent more than once (not
// idempotent, CONNECT, or a body that cannot be replayed) is a call of one
// attempt, which stops, when the attempt fails in a way the policy would
// otherwise retry, with [retry.ErrNotIdempotent] or [ErrBodyNotReplayable]
// as its Reason. RoundTrip returns a response and a nil error, or a nil
// response and a [*retry.Error]. A request that could never be sent (an
// invalid header, method or host) is refused before any attempt, with an
// error marked [retry.Permanent] that says why.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, errNilRequest
	}
	if t.Timeout <= 0 {
		return t.roundTrip(req)
	}
	req, release := withTimeout(req, t.Timeout)
	resp, err := t.roundTrip(req)
	return bound(resp, req, release), err
}

func (t *Transport) roundTrip(req *http.Request) (*http.Response, error) {
	if err := checkRequest(req); err != nil {
		closeBody(req)
		return nil, retry.Permanent(err)
	}

	ctx := req.Context()
	c := &call{t: t, base: t.base(), req: req, policy: t.Policy, refusal: t.refusal(req)}
	if p, ok := ctx.Value(policyKey{}).(*retry.Policy); ok {
		c.policy = *p
	}
	// The core's AttemptTimeout would end the attempt's context when the
	// attempt returns, cutting the body of the response handed back: the
	// call bounds each attempt itself, until the headers arrive.
	c.timeout = c.policy.AttemptTimeout
	c.policy.AttemptTimeout = 0
	c.observe = c.policy.Observe
	c.policy.Observe = c.observeEvent
	c.policy.NumberAttempts = true

	err := retry.Do(ctx, c.attempt, &c.policy)
	if err == nil {
		return c.resp, nil
	}
	if c.attempts == 0 {
		closeBody(req) // no attempt was made; a RoundTripper closes the body all the same
	}
	if c.held == nil {
		return nil, err
	}
	var re *retry.Error
	if errors.As(err, &re) && errors.Is(re.Reason, cause(ctx)) && ended(ctx) {
		// The call stopped because the request's context ended: the held
		// response's body can no longer be read, and the error says why.
		if c.held.Body != nil {
			c.held.Body.Close()
		}
		return nil, err
	}
	// Mark the response as one whose retries are spent, so that
	// retry.CheckResponse in an outer loop does not retry it again.
	r := c.held.Request
	if r == nil {
		r = req
	}
	c.held.Request = r.WithContext(context.WithValue(r.Context(), handoff.GaveUp{}, err))
	return c.held, nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// CloseIdleConnections closes the idle connections of Base, if it has a
// CloseIdleConnections method, as [http.Client.CloseIdleConnections] expects.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// refusal returns why req may not be sent more than once, or nil if it may.
func (t *Transport) refusal(req *http.Request) error {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return ErrBodyNotReplayable // replaying it would mean buffering it
	}
	if req.Method == http.MethodConnect {
		return retry.ErrNotIdempotent
	}
	retryable := DefaultRetryable
	if t.Retryable != nil {
		retryable = t.Retryable
	}
	if !retryable(req) {
		return retry.ErrNotIdempotent
	}
	return nil
}

// ErrBodyNotReplayable is the Reason of a call that stopped after one
// attempt, which another attempt might have fixed, because the request's
// body cannot be sent again: it is set and GetBody is nil. Buffering a
// streaming body behind the caller's back could hold any amount of memory,
// so such a request is never retried; set GetBody (http.NewRequest does for
// in-memory bodies) to make it retryable.
var ErrBodyNotReplayable = errors.New("retryhttp: request body cannot be replayed")

// unrepeatable is the error of an attempt that must not be repeated: the
// core stops the call with reason when the error is otherwise worth a retry.
type unrepeatable struct {
	err    error
	reason error
}

func (u *unrepeatable) Error() string       { return u.err.Error() }
func (u *unrepeatable) Unwrap() error       { return u.err }
func (u *unrepeatable) Unrepeatable() error { return u.reason }

// call is the state of one RoundTrip. Its methods run on the goroutine that
// called RoundTrip, inside retry.Do.
type call struct {
	t       *Transport
	base    http.RoundTripper
	req     *http.Request
	policy  retry.Policy // the Transport's or the request's, with the hooks below
	timeout time.Duration
	observe func(context.Context, retry.Event) // the user's
	obsCtx  context.Context                    // the request's context, with the request
	refusal error                              // why req may not be repeated; nil if it may

	attempts int
	resp     *http.Response // the response of the attempt that succeeded
	held     *http.Response // the response of the attempt that failed last
	heldBy   *guard         // held's guard, if the attempt had a timeout
}

// attempt sends one attempt; retry.Do calls it with the request's context,
// numbered.
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

	// A shallow copy on the attempt's context, which carries its number:
	// req stays as it is.
	r := c.req.WithContext(ctx)
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
	if resp == nil && err == nil {
		err = errNilResponse
	}
	if g != nil {
		resp, err = g.settle(resp, err)
	}
	if err != nil {
		if resp != nil && resp.Body != nil {
			resp.Body.Close() // a RoundTripper returns one or the other
		}
		return c.refuse(&roundTripError{err})
	}
	if resp.Request == nil {
		resp.Request = r
	}
	if err := retry.CheckResponse(resp); err != nil {
		c.held, c.heldBy = resp, g
		return c.refuse(err)
	}
	c.resp = resp
	return nil
}

// refuse marks err as the error of an attempt that must not be repeated,
// when the request may not be.
func (c *call) refuse(err error) error {
	if c.refusal == nil {
		return err
	}
	return &unrepeatable{err: err, reason: c.refusal}
}

// observeEvent is the policy's Observe. Before a retry, the held response is
// drained and closed, so that its connection goes back to the pool during
// the wait; a drain that ran into the end of the request's context means no
// retry follows after all, and the event says so. Then the user's Observe
// sees the event, with the request in its context.
func (c *call) observeEvent(ctx context.Context, e retry.Event) {
	if e.Retry && c.held != nil {
		discard(c.held, c.heldBy, c.timeout)
		c.held, c.heldBy = nil, nil
		if ended(ctx) {
			e.Retry, e.Wait, e.Backoff = false, 0, 0
		}
	}
	if c.observe == nil {
		return
	}
	if c.obsCtx == nil {
		c.obsCtx = context.WithValue(ctx, requestKey{}, c.req)
	}
	c.observe(c.obsCtx, e)
}

// maxDrain is the most of a discarded body read to keep its connection: a
// longer body costs more to read than a new connection does.
const maxDrain = 64 << 10

// maxDrainTime bounds the drain of a discarded body when the policy has no
// AttemptTimeout: a body that stalls (a 503 whose server hangs mid-body) would
// otherwise hold the retry until the request's context ends, which for a
// request without a deadline is never. A second is far more than a 64 KiB
// body takes on any working connection, and far less than a retry is worth.
const maxDrainTime = time.Second

// discard drains and closes a response that will not be returned. A drain is
// bounded by the request's context, and by timeout (the policy's
// AttemptTimeout) or, without one, by maxDrainTime; a drain cut short
// closes the body, and its connection with it.
func discard(resp *http.Response, g *guard, timeout time.Duration) {
	if resp.Body == nil {
		return
	}
	if resp.ContentLength <= maxDrain { // -1, unknown, included
		if g != nil && g.body != nil { // the body is the guard's: its timer cuts it
			g.timer.Reset(timeout)
		} else {
			if timeout <= 0 {
				timeout = maxDrainTime
			}
			cut := time.AfterFunc(timeout, func() { resp.Body.Close() })
			defer cut.Stop()
		}
		io.CopyN(io.Discard, resp.Body, maxDrain)
	}
	resp.Body.Close()
}

// closeBody closes req's body, as a RoundTripper must even when it sends
// nothing.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
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

var (
	errNilRequest  = errors.New("retryhttp: nil request")
	errNilResponse = errors.New("retryhttp: Base returned neither a response nor an error")
)
