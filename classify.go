package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
)

// Decision is a classifier's verdict on an error.
//
// The zero value is [Unknown].
type Decision int8

const (
	// Unknown means the classifier has no opinion; the next classifier in a
	// [Classifiers] list decides. Unknown at the end of the list retries.
	Unknown Decision = iota
	// Retry means the error is transient: another attempt may succeed.
	Retry
	// Stop means the error is permanent: another attempt would fail the same way.
	Stop
)

// String returns "unknown", "retry" or "stop".
func (d Decision) String() string {
	switch d {
	case Retry:
		return "retry"
	case Stop:
		return "stop"
	}
	return "unknown"
}

// Classifier decides whether a failed attempt's error is worth another
// attempt. It is called with a non-nil error and must be safe for concurrent
// use when the [Policy] that holds it is shared.
//
// Before a Classifier runs, the retry loop has already stopped if the caller's
// context is done, and has obeyed any [Permanent] or [Transient] marker. A nil
// Classifier in a Policy means [DefaultClassifier].
type Classifier func(error) Decision

// Classifiers returns a Classifier that asks each of cs in order and answers
// with the first that is not [Unknown]; nil entries are skipped, and if none
// has an opinion the answer is Unknown (which the retry loop treats as
// [Retry]). To build on the default rules and make the policy strict:
//
//	retry.Classifiers(mine, retry.DefaultClassifier, func(error) retry.Decision { return retry.Stop })
func Classifiers(cs ...Classifier) Classifier {
	list := make([]Classifier, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			list = append(list, c)
		}
	}
	return func(err error) Decision {
		for _, c := range list {
			if d := c(err); d != Unknown {
				return d
			}
		}
		return Unknown
	}
}

// DefaultClassifier holds the rules a [Policy] uses when its Classifier is
// nil. It looks through the whole error tree, as [errors.Is] does, and applies
// the first rule that matches:
//
//   - context.Canceled from fn: Stop. Someone cancelled the work on purpose.
//   - context.DeadlineExceeded: Retry. The loop has already stopped if it was
//     the caller's deadline, so this is an attempt's own timeout.
//   - TLS and x509 verification errors, and a plain HTTP server answering a
//     TLS client (http.ErrSchemeMismatch): Stop. A bad certificate stays bad.
//     They come wrapped in *url.Error, a net.Error, so they are checked before
//     the network rules.
//   - DNS "no such host": Stop.
//   - a [*ResponseError] with status 408, 429, 500, 502, 503 or 504: Retry;
//     501, any other 4xx, or a status outside 400-599: Stop; other 5xx: Unknown.
//   - ECONNRESET, ECONNREFUSED, EPIPE, ECONNABORTED, io.ErrUnexpectedEOF, and a
//     net.Error whose Timeout() is true anywhere in the tree: Retry.
//   - anything else: Unknown.
//
// DefaultClassifier does not look at [Permanent] and [Transient] markers: the
// retry loop applies them before it asks any classifier. It does not allocate
// and is safe for concurrent use.
func DefaultClassifier(err error) Decision {
	switch {
	case err == nil:
		return Unknown
	case errors.Is(err, context.Canceled):
		return Stop
	case errors.Is(err, context.DeadlineExceeded):
		return Retry
	case isCertificateError(err):
		return Stop
	}
	if _, ok := findFunc(err, isNotFound); ok {
		return Stop
	}
	if re, ok := find[*ResponseError](err); ok {
		return statusDecision(re.StatusCode)
	}
	if isConnectionError(err) || errors.Is(err, syscall.ECONNREFUSED) || isTimeout(err) {
		return Retry
	}
	return Unknown
}

// statusDecision holds the HTTP status rules of DefaultClassifier.
func statusDecision(code int) Decision {
	switch {
	case code == 408, code == 429, code == 500, code == 502, code == 503, code == 504:
		return Retry
	case code == 501, code < 500, code > 599:
		return Stop
	}
	return Unknown
}

// isCertificateError reports whether err's tree holds a TLS handshake or
// certificate verification failure. http.Client turns the
// tls.RecordHeaderError of a plain HTTP server's answer into
// http.ErrSchemeMismatch, so that sentinel counts too.
func isCertificateError(err error) bool {
	return has[*tls.CertificateVerificationError](err) ||
		has[x509.UnknownAuthorityError](err) ||
		has[x509.CertificateInvalidError](err) ||
		has[x509.HostnameError](err) ||
		has[x509.SystemRootsError](err) ||
		has[x509.UnhandledCriticalExtension](err) ||
		has[x509.ConstraintViolationError](err) ||
		has[x509.InsecureAlgorithmError](err) ||
		has[tls.RecordHeaderError](err) ||
		has[tls.AlertError](err) ||
		errors.Is(err, http.ErrSchemeMismatch)
}

// isConnectionError reports whether err's tree holds a connection that broke
// after it was established: the request may or may not have been processed.
func isConnectionError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// isTimeout reports whether err's tree holds a net.Error that timed out. It
// looks past a net.Error that says no: *url.Error asks only the error it
// wraps directly, so when http.Client reports "transport connection broken:
// %w" around a timed-out write, the *url.Error's Timeout is false and only the
// *net.OpError inside it knows.
func isTimeout(err error) bool {
	_, ok := findFunc(err, net.Error.Timeout)
	return ok
}

// isNotFound reports whether a DNS lookup failed because the name does not exist.
func isNotFound(e *net.DNSError) bool { return e.IsNotFound }

// outcomeUnknown reports whether a failed attempt leaves open whether it took
// effect: it timed out, or its connection broke mid-way. A DNS failure proves
// the request was never sent, even when the lookup timed out. A bare io.EOF
// from an HTTP round trip (the server closed the connection after reading the
// request, perhaps after acting on it) counts as broken mid-way; an io.EOF
// elsewhere is just the end of something.
func outcomeUnknown(err error) bool {
	if has[*net.DNSError](err) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || isTimeout(err) || isConnectionError(err) ||
		(errors.Is(err, io.EOF) && has[*url.Error](err))
}

// Permanent marks err as not worth retrying, whatever the classifier says:
// the retry loop stops at once with [ErrNotRetryable]. errors.Is and
// errors.As still reach err, and the marker's text is err's text. When markers
// are nested, the outermost wins. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, decision: Stop}
}

// Transient marks err as worth retrying, whatever the classifier says. The
// loop's other limits (the caller's context, attempts, budget, deadline) still
// apply. errors.Is and errors.As still reach err, and the marker's text is
// err's text. When markers are nested, the outermost wins. Transient(nil) is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, decision: Retry}
}

// marked is the error made by Permanent and Transient.
type marked struct {
	err      error
	decision Decision
}

func (m *marked) Error() string { return m.err.Error() }
func (m *marked) Unwrap() error { return m.err }

// unmark removes the markers wrapped around err, so that a returned error
// holds what fn returned without our wrapping.
func unmark(err error) error {
	for {
		m, ok := err.(*marked)
		if !ok {
			return err
		}
		err = m.err
	}
}

// classify gives the loop's decision for a failed attempt: the outermost
// marker, else the policy's classifier; Unknown retries.
func classify(c Classifier, err error) Decision {
	if m, ok := find[*marked](err); ok {
		return m.decision
	}
	if c == nil {
		c = DefaultClassifier
	}
	if c(err) == Stop {
		return Stop
	}
	return Retry
}

// find returns the first error in err's tree, in the order errors.As uses
// (depth first, pre-order), that has type E. Unlike errors.As it takes no
// pointer target, so nothing escapes to the heap; nor does it call As methods.
func find[E error](err error) (E, bool) {
	return findFunc[E](err, nil)
}

// findFunc is find for the first error of type E for which match, when not
// nil, is true.
func findFunc[E error](err error, match func(E) bool) (E, bool) {
	for err != nil {
		if e, ok := err.(E); ok && (match == nil || match(e)) {
			return e, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if e, ok := findFunc(inner, match); ok {
					return e, true
				}
			}
			return *new(E), false
		default:
			return *new(E), false
		}
	}
	return *new(E), false
}

// has reports whether err's tree holds an error of type E.
func has[E error](err error) bool {
	_, ok := find[E](err)
	return ok
}
