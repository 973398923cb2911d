// Package retryhttp retries HTTP requests that are safe to repeat, with the
// policies of package [github.com/seed93a044d1/retry]. Its [Transport] is an
// [http.RoundTripper], so turning it on is a one-line change where the
// [http.Client] is built:
//
//	client := retryhttp.NewClient(http.DefaultClient, retry.Policy{MaxAttempts: 3})
//
// # What is retried
//
// Only a request that is safe to send again is retried: one whose method
// RFC 9110 calls idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), or one
// that carries a non-empty Idempotency-Key or X-Idempotency-Key header, so
// that the server can recognise a repeat. [Transport].Retryable replaces that
// rule, for instance to opt POST in to an endpoint known to be idempotent;
// [DefaultRetryable] is the rule, so that a Retryable can build on it. Its
// body must also be replayable: nil, [http.NoBody], or a request with
// GetBody (which [http.NewRequest] sets for the usual in-memory readers).
// A streaming body without GetBody is sent once and never buffered behind the
// caller's back. CONNECT is never retried.
//
// A request that is not retried is still a call of the policy, of one
// attempt: the Limiter paces it, it deposits in the Budget, AttemptTimeout
// bounds it and Observe sees it, so a provider-wide limit and the metrics
// count every request. When that attempt fails in a way the policy would
// retry, the call stops with a Reason that names the rule:
// [retry.ErrNotIdempotent] for a method that is not idempotent (or that
// Retryable refused) and for CONNECT, [ErrBodyNotReplayable] for a body that
// cannot be sent again. Its response comes back as any other call's last
// response does; a transport error as a [*retry.Error].
//
// [NewClient] sets the policy only; [Transport.Client] builds a client from
// a Transport with every setting (Retryable, AttemptHeader, Timeout).
//
// # Idempotency keys
//
// With [Transport].IdempotencyKey set (to [NewKey], say), a POST or a PATCH
// that carries no key of its own gets one, made once per request and sent
// on every attempt, as draft-ietf-httpapi-idempotency-key-header asks: the
// server can then recognise the repeats and do the work once, and the
// request is retried like an idempotent one. When the call fails, [KeyFrom]
// gives the key from the error, to ask the server whether the work was done.
//
// # Hedging
//
// A Policy with Hedge set hedges the requests the Transport would retry
// (idempotent, or with a key, and with a replayable body), and only those:
// when an attempt has not answered after the hedge delay, another starts
// beside it, and the first response that is not a failure wins. The others
// are cancelled: an HTTP/2 stream is reset and its connection kept, an
// HTTP/1.1 request cancelled in flight costs its connection, which net/http
// closes. Every response that is not returned is drained and closed before
// RoundTrip returns.
//
// # Responses and errors
//
// Each attempt's response goes through [retry.CheckResponse], so the policy's
// classifier sees a [*retry.ResponseError] for a 4xx or 5xx status:
// [retry.DefaultClassifier] retries 408, 429, 500, 502, 503 and 504 (a
// server's x-should-retry header overrides that, for the requests retried
// at all), and the next attempt never starts earlier than the server asked
// in Retry-After, its millisecond forms, the RateLimit fields or
// X-RateLimit-Reset (CheckResponse has the table). Every response that is
// not returned is drained (up to 64 KiB) and closed before the wait, so its
// connection goes back to the pool.
//
// When retrying stops on a response (a status that is not retried, attempts
// or budget exhausted, a server delay above Policy.MaxRetryAfter or past
// the deadline, or a Breaker that will refuse the retry), RoundTrip returns
// that last response, body unread, and a nil error, as net/http does. A
// transport error (and a stop before any response, or during or at the end
// of a wait, as when no Concurrency slot is found for the retry) comes back
// as a [*retry.Error] holding the last attempt's error; an [http.Client] wraps it in a [*url.Error], and errors.Is
// and errors.As reach it through both. If the request's context ends while a
// response is held, the response is closed and RoundTrip returns a
// *retry.Error whose Reason is the context's cause.
//
// # Timeouts
//
// The request's context bounds the whole call, waits included: no wait runs
// past its deadline. [Transport].Timeout does the same from the start of
// each request, and bounds the reading of the returned body too, as
// [http.Client].Timeout does; [NewClient] moves a client's Timeout there,
// because net/http, when its own Timeout fires, replaces the error with one
// that no longer holds the [*retry.Error]. Policy.AttemptTimeout bounds each
// attempt until its response headers arrive, and no longer: the body of the
// response handed back is never cut by it, however slowly the caller reads.
// A discarded response's drain is bounded by AttemptTimeout again (by one
// second without one), and by the request's context; a drain cut short
// closes its connection.
//
// # Concurrency and circuit breakers
//
// Policy.Concurrency and Policy.Breaker bound every attempt of every
// request that shares them, first attempts, retries and hedges alike, as
// they do in [retry.Do]. An attempt holds its slot from its start until its
// response headers arrive or it fails: the end of RoundTrip's attempt, when
// the core gives the slot back. The body of the response returned is read
// outside any slot, as Policy.AttemptTimeout does not bound it either, so a
// ConcurrencyLimit bounds the requests waiting for an answer, not the
// bodies still open; to bound those too, take a slot of another
// Concurrency (with Policy.Admit) before the request and give it back when
// the body is closed. A hedge starts
// only if a slot is free at once. A hedge that loses gives its slot back as
// soon as its attempt returns, cancelled; the server may still be working
// on it until it sees the cancellation (a closed HTTP/1.1 connection, a
// reset HTTP/2 stream), so, with hedging, a server can for that moment be
// working on more requests than there are slots.
//
// A Breaker counts the failures the classifier retries (a 503, a reset
// connection), never a status it stops on (a 404, a 400). While it refuses,
// RoundTrip sends nothing and returns a nil response and a [*retry.Error]
// whose Reason Is [retry.ErrBreakerOpen] and has a method Until() time.Time.
// A request that has had a response stops by the rule above: on that
// response, with a nil error, when the breaker is known to refuse the
// retry as it is planned (the response opened it, say); with a
// *retry.Error whose Last is the response's [*retry.ResponseError], its
// Reason ErrBreakerOpen or [retry.ErrNoSlot], when the breaker refuses, or
// no slot is found, at the end of the wait, the response having been drained
// by then. Either way, a loop around the client stops with the same
// reason.
//
// The wait for a slot counts against the request's context: a request
// whose deadline comes while it waits returns then, with a *retry.Error
// whose Reason is ErrNoSlot (it could no longer start Policy.MinAttemptTime
// before the deadline, or the Concurrency's queue was full) or the
// context's cause.
//
// # Requests that can never be sent
//
// A request with an invalid header or trailer field, an invalid method or no
// host is refused before the first attempt, with an error marked
// [retry.Permanent] that says why; net/http would refuse it the same way on
// every attempt. An unsupported scheme fails its one attempt, and the
// default classifier stops on it.
//
// # One layer of retries
//
// A response that the Transport returns after giving up on it (its
// attempts, budget or time ran out) is marked, so that [retry.CheckResponse]
// in a loop around the client gives an error the default classifier does
// not retry; a transport error is a *retry.Error, which it does not retry
// either. Retrying at one layer keeps attempts from multiplying.
//
// # Observing
//
// Policy.Observe sees every attempt and the end of every request; inside it,
// [RequestFrom] returns the request, so a hook shared by all the requests of
// a client can say which one it sees. [WithPolicy] lets one request carry a
// policy of its own through its context. Attempts are numbered, so
// retry.AttemptFrom(resp.Request.Context()) tells which attempt produced a
// response.
//
// # Servers may see more requests than MaxAttempts
//
// [http.Transport] itself sends a request again, inside one attempt, when a
// reused keep-alive connection fails before any byte of the response arrives
// and the request is replayable (an idempotent method or an idempotency key,
// and a body that can be replayed). So a server may see more requests than
// Policy.MaxAttempts. Idempotency keys make such repeats harmless.
package retryhttp
