package retryhttp

import (
	"errors"
	"net/http"
	"strings"

	"github.com/seed93a044d1/retry"
)

// KeyFrom returns the idempotency key that every attempt of a failed request
// carried, from the error its call returned: the [*retry.Error] of
// [Transport.RoundTrip], or the *url.Error an [http.Client] wraps it in. The
// key is the one [Transport].IdempotencyKey made, or the request's own
// Idempotency-Key (else X-Idempotency-Key) header, without the quotes of a
// Structured Field String. It returns "" for an error that no attempt of a
// keyed request ended with.
//
// A call that failed may still have taken effect on the server (the error's
// OutcomeUnknown says when): the key is what to ask the server about before
// deciding whether to send the work again, under the same key. A call that
// stopped on a response returns no error; its key is in the response's
// Request header.
func KeyFrom(err error) string {
	var k *keyedError
	if errors.As(err, &k) {
		return k.key
	}
	return ""
}

// keyedError is the last attempt's error of a keyed request, with the key.
// Its text is the error's own, and errors.Is and errors.As reach the error
// through it.
type keyedError struct {
	err error
	key string
}

func (e *keyedError) Error() string { return e.err.Error() }
func (e *keyedError) Unwrap() error { return e.err }

// withKeyInError returns the error of req's call with req's idempotency key
// where KeyFrom finds it: a copy of the *retry.Error whose Last is wrapped,
// so that the error is still a *retry.Error, with the same text, reason and
// outcome. Any other error, and a call of a request without a key or with
// no attempt, is returned as it is.
func withKeyInError(err error, req *http.Request) error {
	e, ok := err.(*retry.Error)
	if !ok || e.Last == nil {
		return err
	}
	key := sentKey(req.Header)
	if key == "" {
		return err
	}
	c := *e
	c.Last = &keyedError{err: e.Last, key: key}
	return &c
}

// sentKey returns the idempotency key in h, unquoted if it is a Structured
// Field String (as the keys withKey sets are).
func sentKey(h http.Header) string {
	v := h.Get("Idempotency-Key")
	if v == "" {
		v = h.Get("X-Idempotency-Key")
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(v[1 : len(v)-1])
	}
	return v
}
