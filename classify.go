package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	f := inspect(err)
	switch {
	case f.has(isCanceled):
		return Stop
	case f.has(isDeadline):
		return Retry
	case f.has(isCertificate):
		return Stop
	case f.has(isNotFound):
		return Stop
	case f.has(isStatus):
		return statusDecision(f.status)
	case f.has(isBroken | isRefused | isTimeout):
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

// outcomeUnknown reports whether a failed attempt leaves open whether it took
// effect: it timed out, or its connection broke mid-way. A DNS failure proves
// the request was never sent, even when the lookup timed out. A bare io.EOF
// from an HTTP round trip (the server closed the connection after reading the
// request, perhaps after acting on it) counts as broken mid-way; an io.EOF
// elsewhere is just the end of something.
func outcomeUnknown(err error) bool {
	f := inspect(err)
	switch {
	case f.has(isDNS):
		return false
	case f.has(isDeadline | isTimeout | isBroken):
		return true
	}
	return f.has(isEOF) && f.has(isURL)
}

// facts is what one walk of an error tree finds out for the default rules.
// The rules apply in a fixed order to the whole tree, so one pass that notes
// every fact and then picks the first rule that holds gives the same answer
// as a walk per rule (errors.Is, errors.As), several times faster and without
// allocating.
type facts struct {
	set    fact
	status int // of the first *ResponseError
}

type fact uint16

const (
	isCanceled    fact = 1 << iota // context.Canceled
	isDeadline                     // context.DeadlineExceeded
	isCertificate                  // a TLS handshake or certificate verification failure
	isDNS                          // any *net.DNSError
	isNotFound                     // a *net.DNSError saying the name does not exist
	isStatus                       // a *ResponseError
	isBroken                       // ECONNRESET, ECONNABORTED, EPIPE, io.ErrUnexpectedEOF
	isRefused                      // ECONNREFUSED
	isTimeout                      // a net.Error whose Timeout() is true
	isEOF                          // io.EOF
	isURL                          // a *url.Error: a net/http round trip
)

func (f *facts) has(any fact) bool { return f.set&any != 0 }

// inspect walks err's tree, as errors.Is does, and notes its facts.
func inspect(err error) facts {
	var f facts
	f.walk(err)
	return f
}

func (f *facts) walk(err error) {
	for err != nil {
		f.note(err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				f.walk(inner)
			}
			return
		default:
			return
		}
	}
}

// sentinels are the errors the default rules compare with, and their facts.
var sentinels = [...]struct {
	err  error
	fact fact
}{
	{context.Canceled, isCanceled},
	{context.DeadlineExceeded, isDeadline},
	{io.ErrUnexpectedEOF, isBroken},
	{io.EOF, isEOF},
	// http.Client turns the tls.RecordHeaderError of a plain HTTP server
	// answering a TLS client into this sentinel.
	{http.ErrSchemeMismatch, isCertificate},
}

// note records the facts of one error in the tree, without unwrapping it.
func (f *facts) note(err error) {
	switch e := err.(type) {
	case syscall.Errno:
		switch e {
		case syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE:
			f.set |= isBroken
		case syscall.ECONNREFUSED:
			f.set |= isRefused
		}
		return // an Errno's Is method knows none of the sentinels
	case *ResponseError:
		if !f.has(isStatus) {
			f.set |= isStatus
			f.status = e.StatusCode
		}
	case *net.DNSError:
		f.set |= isDNS
		if e.IsNotFound {
			f.set |= isNotFound
		}
	case *url.Error:
		f.set |= isURL
	case *tls.CertificateVerificationError, x509.UnknownAuthorityError, x509.CertificateInvalidError,
		x509.HostnameError, x509.SystemRootsError, x509.UnhandledCriticalExtension,
		x509.ConstraintViolationError, x509.InsecureAlgorithmError, tls.RecordHeaderError, tls.AlertError:
		f.set |= isCertificate
	}
	// A *url.Error asks only the error it wraps directly whether it timed
	// out, so every net.Error in the tree is asked, not just the first: when
	// http.Client reports a timed-out write as "transport connection broken",
	// only the *net.OpError inside knows.
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		f.set |= isTimeout
	}
	is, hasIs := err.(interface{ Is(error) bool })
	for _, s := range sentinels {
		// The sentinels are pointers, so == cannot panic.
		if err == s.err || (hasIs && is.Is(s.err)) {
			f.set |= s.fact
		}
	}
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
// pointer target, so nothing escapes to the heap.
func find[E error](err error) (E, bool) {
	for err != nil {
		if e, ok := err.(E); ok {
			return e, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if e, ok := find[E](inner); ok {
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
