package retryhttp

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// the budget refuses, the server's delay is above the ceiling or would
// pass the deadline, the policy's Breaker refuses, or no Concurrency slot
// is found in time. See the package documentation for what it returns
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
	// returns the request. Attempts are always numbered (AttemptInContext),
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

	// IdempotencyKey, when set, gives a request that is not idempotent by
	// its method and carries no Idempotency-Key or X-Idempotency-Key of its
	// own an Idempotency-Key, which makes it retryable: IdempotencyKey is
	// called once per request (once per RoundTrip: a redirect to another
	// URL is a request of its own), and every attempt, retry or hedge,
	// sends the same key, as draft-ietf-httpapi-idempotency-key-header-07
	// asks, so that the server can recognise the repeats of one request and
	// do the work once. The header's value is the key as a Structured Field
	// String (quoted: "..."). [NewKey] makes keys; a func of your own can
	// make them from what the request is about (an order ID) and log them.
	// The caller's request is not changed: the attempts send a copy, which
	// resp.Request and, inside Observe, RequestFrom return, with the key. A
	// key that is empty is no key; one with a byte outside printable ASCII
	// is refused, with an error, before any attempt. nil means no keys.
	IdempotencyKey func(*http.Request) string

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
	if idempotentMethod(req.Method) {
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// keyed reports whether req is not idempotent by its method but carries an
// idempotency key that makes a repeat safe.
func keyed(req *http.Request) bool {
	return !idempotentMethod(req.Method) &&
		(req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != "")
}

// idempotentMethod reports whether RFC 9110 calls method idempotent (the
// empty method is GET).
func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return false
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
	req, err := t.withKey(req)
	if err != nil {
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
	c.policy.AttemptInContext = true
	// What the request may bear is declared to the core, which hedges only
	// what may run twice at once.
	var bears retry.Option = retry.Once
	switch {
	case c.refusal == nil && keyed(req):
		// A key makes a repeat safe, but a server that follows the
		// idempotency-key draft answers 409 Conflict to a second request
		// while the first with its key is in flight: retried, never hedged.
		bears = retry.Sequential
	case c.refusal == nil:
		bears = nil
	}

	err = retry.Do(ctx, c.attempt, &c.policy, bears) // a nil Option changes nothing
	err = withKeyInError(err, req)                   // for KeyFrom
	if c.attempts.Load() == 0 {
		closeBody(req) // no attempt was made; a RoundTripper closes the body all the same
	}
	if err == nil {
		return c.keep(c.winner), nil
	}
	held := c.keep(c.held)
	if held == nil {
		return nil, err
	}
	var re *retry.Error
	if errors.As(err, &re) && errors.Is(re.Reason, cause(ctx)) && ended(ctx) {
		// The call stopped because the request's context ended: the held
		// response's body can no longer be read, and the error says why.
		if held.Body != nil {
			held.Body.Close()
		}
		return nil, err
	}
	// Mark the response as one whose retries are spent, so that
	// retry.CheckResponse in an outer loop does not retry it again.
	r := held.Request
	if r == nil {
		r = req
	}
	held.Request = r.WithContext(context.WithValue(r.Context(), handoff.GaveUp{}, err))
	return held, nil
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

// withKey returns req with an Idempotency-Key from t.IdempotencyKey, on a
// copy, when req needs one; otherwise req itself.
func (t *Transport) withKey(req *http.Request) (*http.Request, error) {
	if t.IdempotencyKey == nil || idempotentMethod(req.Method) ||
		req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != "" {
		return req, nil
	}
	key := t.IdempotencyKey(req)
	if key == "" {
		return req, nil
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' {
			return req, errBadKey
		}
	}
	r := *req // a shallow copy whose header is its own
	r.Header = req.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header, 1)
	}
	r.Header.Set("Idempotency-Key", `"`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key)+`"`)
	return &r, nil
}

var errBadKey = errors.New("retryhttp: IdempotencyKey made a key with a byte outside printable ASCII")

// NewKey returns a new idempotency key for any request: a version 4 UUID
// (RFC 9562) in its 36-character text form, such as
// "8e03978e-40d5-43e8-bc93-6894a57f9324", from 122 bits of crypto/rand, so
// that two keys are the same with a probability far below that of any
// hardware fault. It is meant for Transport.IdempotencyKey. It is safe for
// concurrent use.
func NewKey(*http.Request) string {
	var b [16]byte
	rand.Read(b[:]) // never fails, as crypto/rand documents
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hexd = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexd[c>>4], hexd[c&0xf]
		j += 2
	}
	return string(out[:])
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

// call is the state of one RoundTrip. retry.Do runs its attempts, on the
// goroutine that called RoundTrip, or, when the policy hedges, several at
// once on goroutines of their own; Observe runs on the first. The responses
// of the attempts are kept by attempt number until the call ends, when all
// but the one returned are drained and closed.
type call struct {
	t       *Transport
	base    http.RoundTripper
	req     *http.Request
	policy  retry.Policy // the Transport's or the request's, with the hooks below
	timeout time.Duration
	observe func(context.Context, retry.Event) // the user's
	obsCtx  context.Context                    // the request's context, with the request
	refusal error                              // why req may not be repeated; nil if it may

	attempts atomic.Int32 // attempts made

	mu   sync.Mutex
	sent []answer  // responses not yet returned or discarded, by attempt number
	one  [1]answer // sent's room for the usual single answer, so that it allocates nothing

	// Set by Observe, on the goroutine that called RoundTrip.
	winner int // the attempt that succeeded
	held   int // the attempt that failed last with a response
}

// answer is attempt n's response, and its guard if the attempt had a
// timeout.
type answer struct {
	n    int
	resp *http.Response
	g    *guard
}

// attempt sends one attempt; retry.Do calls it with the request's context,
// numbered.
func (c *call) attempt(ctx context.Context) error {
	c.attempts.Add(1)
	n := retry.AttemptFrom(ctx)
	var body io.ReadCloser
	if n > 1 {
		if b := c.req.Body; b != nil && b != http.NoBody {
			var err error
			if body, err = c.req.GetBody(); err != nil {
				return retry.Permanent(err)
			}
		}
	}

	var g *guard
	timeout := c.timeout
	if d, ok := ctx.Deadline(); ok && timeout >= time.Until(d) {
		// When the caller's deadline comes first, it alone bounds the
		// attempt, and its error is the caller's, as in the core.
		timeout = 0
	}
	if timeout > 0 {
		g = newGuard(ctx, timeout)
		ctx = g.ctx
	}

	// A shallow copy on the attempt's context, which carries its number:
	// req stays as it is.
	r := c.req.WithContext(ctx)
	if n > 1 {
		if body != nil {
			r.Body = body
		}
		if name := c.t.AttemptHeader; name != "" {
			h := c.req.Header.Clone()
			if h == nil {
				h = make(http.Header, 1)
			}
			h.Set(name, strconv.Itoa(n))
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
	if err == nil && ctx.Err() != nil && c.req.Context().Err() == nil {
		// The core cut the attempt as its answer came: another attempt of
		// a hedged call won, or the call stopped. The answer is not wanted.
		err = ctx.Err()
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
	c.mu.Lock()
	if c.sent == nil {
		c.sent = c.one[:0]
	}
	c.sent = append(c.sent, answer{n, resp, g})
	c.mu.Unlock()
	if err := retry.CheckResponse(resp); err != nil {
		return c.refuse(err)
	}
	return nil
}

// keep returns the response of attempt n, if it has one, and drains and
// closes every other response the call kept. Every attempt has returned by
// then.
func (c *call) keep(n int) *http.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kept *http.Response
	for _, a := range c.sent {
		if a.n == n {
			kept = a.resp
			continue
		}
		discard(a.resp, a.g, c.timeout)
	}
	c.sent = nil
	return kept
}

// cut reports whether e is the end of an attempt that the core cut because
// the call had stopped: it has no response, and its error is the
// cancellation, while the request's context lives on.
func (c *call) cut(ctx context.Context, e retry.Event) bool {
	if ctx.Err() != nil || !errors.Is(e.Err, context.Canceled) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.sent {
		if a.n == e.Attempt {
			return false
		}
	}
	return true
}

// drop drains and closes the response of attempt n, if it has one.
func (c *call) drop(n int) {
	c.mu.Lock()
	var a answer
	for i, x := range c.sent {
		if x.n == n {
			a = x
			c.sent = append(c.sent[:i], c.sent[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if a.resp != nil {
		discard(a.resp, a.g, c.timeout)
	}
}

// refuse marks err as the error of an attempt that must not be repeated,
// when the request may not be.
func (c *call) refuse(err error) error {
	if c.refusal == nil {
		return err
	}
	return &unrepeatable{err: err, reason: c.refusal}
}

// observeEvent is the policy's Observe. Before a retry, the failed
// attempt's response is drained and closed, so that its connection goes back
// to the pool during the wait; a drain that ran into the end of the
// request's context means no retry follows after all, and the event says
// so. A failed attempt followed by no retry holds its response, to be
// returned if the call stops on it (a hedged call may go on: the next
// failure takes its place). Then the user's Observe sees the event, with the
// request in its context.
func (c *call) observeEvent(ctx context.Context, e retry.Event) {
	switch {
	case e.Done:
	case e.Err == nil:
		if c.winner == 0 { // the first success won; a hedge that succeeded too follows it
			c.winner = e.Attempt
		}
	case e.Retry:
		c.drop(e.Attempt)
		if ended(ctx) {
			e.Retry, e.Wait, e.Backoff = false, 0, 0
		}
	case c.winner == 0 && !c.cut(ctx, e):
		// Not a hedge cut off by the winner, nor one cut as the call stopped
		// on another attempt's response (its event follows that one's).
		if c.held != 0 && c.held != e.Attempt {
			c.drop(c.held)
		}
		c.held = e.Attempt
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
		if g != nil && g.body != nil && g.timer != nil { // the body is the guard's: its timer cuts it
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
