package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// Decision is a classifier's verdict on an error.
//
// The zero value is [Undecided].
type Decision int8

const (
	// Undecided means the classifier has no opinion; the next classifier in a
	// [Classifiers] list decides. Undecided at the end of the list retries.
	Undecided Decision = iota
	// Retry means the error is transient: another attempt may succeed.
	Retry
	// Stop means the error is permanent: another attempt would fail the same way.
	Stop
)

// Unknown is the former name of Undecided.
//
// Deprecated: Use Undecided. Unknown read as related to [OutcomeUnknown],
// which says whether a failed call may have taken effect, a different
// question; it goes before v1.
const Unknown = Undecided

// String returns "unknown" (for Undecided: its former name, kept for the
// logs and tables that read it until the name goes), "retry" or "stop".
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
// with the first that is not [Undecided]; nil entries are skipped, and if none
// has an opinion the answer is Undecided (which the retry loop treats as
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
			if d := c(err); d != Undecided {
				return d
			}
		}
		return Undecided
	}
}

// DefaultClassifier holds the rules a [Policy] uses when its Classifier is
// nil. It looks through the whole error tree, as [errors.Is] does, and applies
// the first rule that matches:
//
//   - an error in the tree with a method RetryDecision() Decision that gives
//     an opinion (the outermost such one, and not one inside an error that
//     came out of a retry loop, see below): its answer. An adapter's errors
//     carry their own world's rules this way (retrygrpc's gRPC code table,
//     say), so that one Policy whose Classifier is
//     Classifiers(mine, DefaultClassifier) applies each world's table where
//     mine has no opinion, in Do, retryhttp, retrygrpc and retryriver alike.
//     A [*ResponseError] answers with the server's x-should-retry header.
//   - context.Canceled from fn: Stop. Someone cancelled the work on purpose.
//   - an error that already came out of a retry loop (a [*Error], from a
//     nested Do or from retryhttp, or what [CheckResponse] makes of a
//     response that retryhttp returned after giving up on it): Stop. That loop has spent its attempts,
//     its budget or its time, and retrying at a second layer multiplies the
//     load on the dependency exactly when it is failing: a client, a gateway,
//     a service and a driver making 3 attempts each turn one action into 81
//     calls. Retry at one layer; to retry at two on purpose, wrap the inner
//     error with [Transient]. The loop then stops with [ErrAlreadyRetried].
//   - a request that net/http refuses before sending anything: an unsupported
//     protocol scheme, an invalid header or trailer field, an invalid
//     method, no host in the URL: Stop. It would fail the same way every
//     time. (net/http reports these as plain text errors, which is how they
//     are recognised; retryhttp checks what it can before the first attempt.)
//   - context.DeadlineExceeded: Retry. The loop has already stopped if it was
//     the caller's deadline, so this is an attempt's own timeout.
//   - TLS and x509 verification errors, and a plain HTTP server answering a
//     TLS client (http.ErrSchemeMismatch): Stop. A bad certificate stays bad.
//     They come wrapped in *url.Error, a net.Error, so they are checked before
//     the network rules.
//   - DNS "no such host": Stop.
//   - a [*ResponseError] with status 408, 429, 500, 502, 503 or 504: Retry;
//     501, any other 4xx, or a status outside 400-599: Stop; other 5xx:
//     Undecided. A server's x-should-retry header overrides this rule, by the
//     first one.
//   - a database error with a SQLState() string method (pgx's
//     *pgconn.PgError, lib/pq's *pq.Error): serialization failure 40001 and
//     deadlock 40P01: Retry (the database rolled the transaction back, so
//     the unit to retry is the whole transaction, from BEGIN);
//     statement_completion_unknown 40003 (CockroachDB's ambiguous commit):
//     Retry, with its outcome unknown; connection
//     exceptions (class 08), too_many_connections 53300 and the shutdown
//     codes 57P01, 57P02 and 57P03: Retry; query_canceled 57014: Retry
//     (a statement_timeout is the database's own attempt timeout, retried
//     as an AttemptTimeout is; the statement was rolled back, so its outcome
//     is known. PostgreSQL gives the same code to an operator's
//     pg_cancel_backend, which is a one-off cancel, not a verdict on the
//     statement, and is retried too; a classifier that must stop on it can
//     read the error's message. A cancel sent because the caller's context
//     ended never reaches the classifier: the loop has stopped); data exceptions (class 22),
//     integrity violations (class 23) and syntax or access errors (class 42):
//     Stop; other codes: Undecided. driver.ErrBadConn, and an error whose
//     SafeToRetry() method reports true (pgx's way of saying nothing was
//     sent): Retry.
//   - net/http's proofs that a request was not processed, for any method:
//     an HTTP/2 stream refused (REFUSED_STREAM) or left out by a GOAWAY, a
//     kept-alive connection the server closed before the request was
//     written: Retry.
//   - ECONNRESET, ECONNREFUSED, EPIPE, ECONNABORTED, io.ErrUnexpectedEOF, an
//     HTTP/2 stream reset with any other code, a GOAWAY that covered the
//     request followed by the connection's close, an HTTP/2 connection
//     error, and a net.Error whose Timeout() is true anywhere in the tree:
//     Retry.
//   - anything else: Undecided.
//
// DefaultClassifier does not look at [Permanent] and [Transient] markers: the
// retry loop applies them before it asks any classifier. It does not allocate
// and is safe for concurrent use.
func DefaultClassifier(err error) Decision {
	f := inspect(err)
	return f.decision()
}

// decision applies the rules of DefaultClassifier to the facts of an error.
func (f *facts) decision() Decision {
	if f.own != Undecided {
		return f.own
	}
	switch {
	case f.has(isCanceled):
		return Stop
	case f.has(isRetried | isInvalid):
		return Stop
	case f.has(isDeadline):
		return Retry
	case f.has(isCertificate):
		return Stop
	case f.has(isNotFound):
		return Stop
	case f.has(isStatus):
		return statusDecision(f.status)
	case f.has(isSQL):
		if d := sqlDecision(f.sqlState); d != Undecided {
			return d
		}
	}
	if f.has(isBroken | isRefused | isTimeout | isUnsent) {
		return Retry
	}
	return Undecided
}

// statusDecision holds the HTTP status rules of DefaultClassifier.
func statusDecision(code int) Decision {
	switch {
	case code == 408, code == 429, code == 500, code == 502, code == 503, code == 504:
		return Retry
	case code == 501, code < 500, code > 599:
		return Stop
	}
	return Undecided
}

// sqlDecision holds the SQLSTATE rules of DefaultClassifier. The codes are
// PostgreSQL's (Appendix A of its manual), which follow the SQL standard's
// classes: the first two characters.
func sqlDecision(state string) Decision {
	switch state {
	case "40001", "40P01", "40003", "53300", "57014", "57P01", "57P02", "57P03":
		return Retry
	}
	if len(state) != 5 {
		return Undecided
	}
	switch state[:2] {
	case "08":
		return Retry
	case "22", "23", "42":
		return Stop
	}
	return Undecided
}

// OutcomeUnknown reports whether a failed attempt that returned err may still
// have taken effect, so that a caller who gives up must reconcile before
// doing the work again by other means; [Error].OutcomeUnknown is true when it
// held for any attempt of a call. The rules, in order:
//
//   - an error in the tree with a method OutcomeUnknown() bool decides (the
//     outermost one): an adapter that knows more than the error's type, such
//     as whether a request was sent, says so this way; a nested [*Error]
//     answers with its own OutcomeUnknown;
//   - an error that proves nothing was done: a DNS failure (the request was
//     never sent, even if the lookup timed out), a failed dial and a TLS
//     handshake timeout (no connection, so nothing sent), an error whose
//     SafeToRetry() method reports true, driver.ErrBadConn (database/sql's
//     drivers return it only when nothing was sent), net/http's proofs that
//     the server did not process a request (an HTTP/2 stream refused with
//     REFUSED_STREAM or left out by a GOAWAY's last stream ID, a kept-alive
//     connection closed before the request was written), and a database
//     error with a SQLSTATE the server sent (it reports a statement it did
//     not carry out) other than a connection exception: false;
//   - a timeout (context.DeadlineExceeded, a net.Error whose Timeout() is
//     true), a cancellation (context.Canceled: the caller's context ended
//     while the attempt was in flight, and a request that had left may have
//     been carried out), an error whose SafeToRetry() method reports false (pgx's "the
//     request may have been sent", as when a COMMIT's connection closes
//     before its answer), a connection reset or aborted, a broken pipe,
//     io.ErrUnexpectedEOF, a SQLSTATE connection exception (class 08) other
//     than 08001 and 08004, which say the connection was never made,
//     SQLSTATE 40003 (statement completion unknown), an
//     HTTP connection closed before the response came (io.EOF inside a
//     *url.Error; retryhttp answers the same for its attempts), an HTTP/1
//     response that broke or was malformed after the request was written
//     ("transport connection broken"), an HTTP/2 stream reset with any code
//     but REFUSED_STREAM, a GOAWAY that covered the request followed by the
//     connection's close, and an HTTP/2 connection error: true;
//   - anything else, HTTP statuses and refused connections included: false.
//
// net/http cannot always tell: when a connection closes before any byte of
// the response, it returns the same io.EOF whether or not the server read
// the request, so that counts as unknown.
//
// It is safe for concurrent use and does not allocate.
func OutcomeUnknown(err error) bool {
	f := inspect(err)
	return f.outcomeUnknown()
}

// outcomeUnknown applies the rules of OutcomeUnknown to the facts of an error.
func (f *facts) outcomeUnknown() bool {

	switch {
	case f.has(isDecided):
		return f.has(isUnknown)
	case f.has(isDNS | isUnsent | isNoConn):
		return false
	case f.has(isSQL):
		return sqlOutcomeUnknown(f.sqlState)
	case f.has(isDeadline | isCanceled | isTimeout | isBroken | isSent):
		return true
	}
	return f.has(isEOF) && f.has(isURL)
}

// sqlOutcomeUnknown reports whether a database error with this SQLSTATE
// leaves open whether the work was done: a connection that broke after it
// was made (a COMMIT may have been applied without its reply arriving),
// 08007 transaction_resolution_unknown above all, and 40003
// statement_completion_unknown.
func sqlOutcomeUnknown(state string) bool {
	switch state {
	case "08001", "08004": // the connection was never made
		return false
	case "40003": // statement_completion_unknown: a COMMIT may have been applied
		return true
	}
	return len(state) == 5 && state[:2] == "08"
}

// facts is what one walk of an error tree finds out for the default rules.
// The rules apply in a fixed order to the whole tree, so one pass that notes
// every fact and then picks the first rule that holds gives the same answer
// as a walk per rule (errors.Is, errors.As), several times faster and without
// allocating.
type facts struct {
	set      fact
	status   int           // of the first *ResponseError
	sqlState string        // of the first error with a SQLState method
	mark     Decision      // of the outermost Permanent or Transient marker; Undecided if none
	delay    time.Duration // the server's delay carried by the outermost error that has one
	delayed  bool          // whether one has
	own      Decision      // the answer of the outermost error with a RetryDecision method that has an opinion
	refusal  error         // the reason of the outermost error whose Unrepeatable method gives one
	refused  bool          // classify stopped the call with refusal, not for the error's nature
	inner    error         // why the outermost inner retry loop in the tree stopped
}

type fact uint32

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
	isRetried                      // a *Error: the result of a retry loop
	isInvalid                      // a request net/http refused to send
	isSQL                          // an error with a SQLState method
	isUnsent                       // proof that nothing was sent or processed: driver.ErrBadConn, SafeToRetry, REFUSED_STREAM
	isNoConn                       // no connection was made, so nothing was sent: a dial error, a TLS handshake timeout
	isSent                         // an HTTP request was sent and its reply was lost or garbled
	isDecided                      // the outermost error that says whether its outcome is unknown...
	isUnknown                      // ...said that it is
)

func (f *facts) has(any fact) bool { return f.set&any != 0 }

// decide records the first answer an error in the tree gives about its
// outcome; outer errors are noted first, so the outermost answer stands.
func (f *facts) decide(unknown bool) {
	if f.has(isDecided) {
		return
	}
	f.set |= isDecided
	if unknown {
		f.set |= isUnknown
	}
}

// inspect walks err's tree, as errors.Is does, and notes its facts.
func inspect(err error) facts {
	var f facts
	f.walk(err, false)
	return f
}

// walk notes the facts of err's tree. Below a *Error (an inner loop's
// result) it notes no error's own answers (RetryDecision, Unrepeatable):
// they were for that loop, which has spoken.
func (f *facts) walk(err error, inLoop bool) {
	for err != nil && !nilPointer(err) {
		f.note(err, inLoop)
		if _, ok := err.(*Error); ok {
			inLoop = true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				f.walk(inner, inLoop)
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
	ptr  bool // err's dynamic type is a pointer, which same compares (set by init)
}{
	{err: context.Canceled, fact: isCanceled},
	{err: context.DeadlineExceeded, fact: isDeadline},
	{err: io.ErrUnexpectedEOF, fact: isBroken},
	{err: io.EOF, fact: isEOF},
	// http.Client turns the tls.RecordHeaderError of a plain HTTP server
	// answering a TLS client into this sentinel.
	{err: http.ErrSchemeMismatch, fact: isCertificate},
	// database/sql's drivers return it only when nothing reached the server.
	{err: driver.ErrBadConn, fact: isUnsent},
}

// note records the facts of one error in the tree, without unwrapping it.
func (f *facts) note(err error, inLoop bool) {
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
		if e.spent != nil {
			f.noteLoop(e.spent)
		}
	case *net.DNSError:
		f.set |= isDNS
		if e.IsNotFound {
			f.set |= isNotFound
		}
	case *url.Error:
		f.set |= isURL
	case *net.OpError:
		if e.Op == "dial" {
			f.set |= isNoConn
		}
	case *Error:
		f.noteLoop(e)
	case *marked:
		if f.mark == Undecided {
			f.mark = e.decision
		}
	case *tls.CertificateVerificationError, x509.UnknownAuthorityError, x509.CertificateInvalidError,
		x509.HostnameError, x509.SystemRootsError, x509.UnhandledCriticalExtension,
		x509.ConstraintViolationError, x509.InsecureAlgorithmError, tls.RecordHeaderError, tls.AlertError:
		f.set |= isCertificate
	default:
		f.noteHTTP(err)
	}
	// A *url.Error asks only the error it wraps directly whether it timed
	// out, so every net.Error in the tree is asked, not just the first: when
	// http.Client reports a timed-out write as "transport connection broken",
	// only the *net.OpError inside knows.
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		f.set |= isTimeout
	}
	if o, ok := err.(interface{ OutcomeUnknown() bool }); ok {
		f.decide(o.OutcomeUnknown())
	}
	// An answer from inside a retry loop's result (below a *Error, or a
	// response retryhttp gave up on) is not taken: that loop has had its
	// say, and the rule of one layer of retries must hold whatever the error
	// inside thinks of itself, such as a server's x-should-retry: true.
	if o, ok := err.(interface{ RetryDecision() Decision }); ok && f.own == Undecided && !inLoop && !f.has(isRetried) {
		f.own = o.RetryDecision()
	}
	if u, ok := err.(interface{ Unrepeatable() error }); ok && f.refusal == nil && !inLoop {
		f.refusal = u.Unrepeatable()
	}
	if d, ok := err.(serverDelayer); ok && !f.delayed {
		f.delay, f.delayed = d.serverDelay(), true
	}
	if s, ok := err.(interface{ SafeToRetry() bool }); ok {
		if s.SafeToRetry() {
			f.set |= isUnsent
		} else {
			// pgx's way of saying the request may have been sent: a COMMIT
			// whose connection closed before its answer came back.
			f.set |= isSent
		}
	}
	if s, ok := err.(interface{ SQLState() string }); ok && !f.has(isSQL) {
		f.set |= isSQL
		f.sqlState = s.SQLState()
	}
	is, hasIs := err.(interface{ Is(error) bool })
	for _, s := range sentinels {
		if (s.ptr && same(err, s.err)) || (!s.ptr && err == s.err) || (hasIs && is.Is(s.err)) {
			f.set |= s.fact
		}
	}
}

func init() {
	for i := range sentinels {
		sentinels[i].ptr = reflect.TypeOf(sentinels[i].err).Kind() == reflect.Pointer
	}
}

// same reports err == sentinel for a sentinel whose dynamic type is a
// pointer, as most of sentinels are: the two are equal exactly when they
// hold the same type and the same pointer. It compares the two words of each interface value, where ==
// would call the runtime for every sentinel of err's own type (most are
// errors.New's, as most errors are): a tenth of a retry's time.
func same(err, sentinel error) bool {
	type iface struct{ tab, data unsafe.Pointer }
	a, b := (*iface)(unsafe.Pointer(&err)), (*iface)(unsafe.Pointer(&sentinel))
	return a.data == b.data && a.tab == b.tab
}

// spent reports whether a loop that stopped for reason had used up what it
// was allowed: its attempts, its budget, its time, or the server's patience.
func spent(reason error) bool {
	switch reason {
	case ErrExhausted, ErrBudgetExhausted, ErrServerDelay, nil:
		return true
	}
	return errors.Is(reason, context.DeadlineExceeded) || errors.Is(reason, context.Canceled)
}

// noteLoop records an error that came out of a retry loop.
func (f *facts) noteLoop(e *Error) {
	if !f.has(isRetried) {
		f.inner = e.Reason
	}
	f.set |= isRetried
	f.decide(e.OutcomeUnknown)
}

// nilPointer reports whether err is a nil pointer in a non-nil interface,
// such as a (*url.Error)(nil) returned as an error: calling its methods would
// panic, so the walks of an error tree stop there. It does not allocate.
func nilPointer(err error) bool {
	v := reflect.ValueOf(err)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// errorString is the type of errors.New's errors (fmt.Errorf's too, without
// %w), which net/http uses for a request it refuses to send.
var errorString = reflect.TypeOf(errors.New(""))

// invalidRequest reports whether msg is one of net/http's errors for a
// request it refuses to send: nothing left the process, and nothing will on
// another attempt.
func invalidRequest(msg string) bool {
	for _, prefix := range [...]string{
		"unsupported protocol scheme ",
		"net/http: invalid header ",
		"net/http: invalid trailer ",
		"net/http: invalid method ",
		"http: no Host in request URL",
		"http: nil Request.URL",
		"http: nil Request.Header",
	} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
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

// classify gives the loop's decision for a failed attempt, from its error
// and that error's facts: nil to retry, or the reason to stop. The outermost
// marker, else the policy's classifier (nil: the default rules), says whether
// the error is worth another attempt (Undecided retries); then an error that
// says it must not be repeated (its Unrepeatable method) stops the call with
// its own reason, since safety outranks the chance of success.
func classify(c Classifier, err error, f *facts) error {
	d := f.mark
	switch {
	case d != Undecided:
	case c == nil:
		d = f.decision()
	default:
		d = c(err)
	}
	switch {
	case d != Stop:
		if f.refusal != nil {
			f.refused = true
			return f.refusal
		}
		return nil
	case f.mark != Stop && f.has(isRetried) && !f.has(isCanceled):
		// An inner loop that spent its attempts, budget or time has retried;
		// one that stopped for any other reason (the error's nature, a rule
		// of safety) did not, and its reason holds here too.
		if spent(f.inner) {
			return ErrAlreadyRetried
		}
		return f.inner
	}
	return ErrNotRetryable
}
