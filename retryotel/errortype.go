package retryotel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/seed93a044d1/retry"
)

// errorType returns the error.type of err: a short name from a fixed set
// for the failures a retry loop meets most, or else the error's Go type, so
// that it stays low-cardinality and never carries the error's text. The
// rules, the first that holds winning:
//
//   - an error in the tree with an ErrorType() string method (OpenTelemetry's
//     convention for an error to name its own type; the outermost counts);
//   - a *retry.ResponseError: its HTTP status code, "503", as the HTTP
//     semantic conventions do;
//   - an error with a SQLState() string method (pgx, lib/pq): the SQLSTATE,
//     "40001", as the database conventions do;
//   - a timeout (context.DeadlineExceeded, or a Timeout() method that
//     reports true): "timeout";
//   - context.Canceled: "canceled";
//   - ECONNRESET, ECONNREFUSED, ECONNABORTED, EPIPE: "connection_reset",
//     "connection_refused", "connection_aborted", "broken_pipe";
//   - io.ErrUnexpectedEOF: "unexpected_eof"; io.EOF: "eof";
//   - otherwise the Go type of the error, as OpenTelemetry's
//     semconv.ErrorType names it ("*net.DNSError", "syscall.Errno"), after
//     unwrapping the wrappers that say nothing of the failure: fmt.Errorf's
//     %w, retry.RetryAfter's, *url.Error, *net.OpError, *os.SyscallError,
//     and any error of an unexported type that wraps one other and reads
//     exactly as it does (see transparent).
//
// It returns "" for a nil err.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	var f found
	f.walk(err, 0)
	switch {
	case f.named != "":
		return f.named
	case f.status != 0:
		return statusName(f.status)
	case f.sqlState != "":
		return f.sqlState
	case f.timeout:
		return "timeout"
	case f.canceled:
		return "canceled"
	case f.errno != "":
		return f.errno
	case f.unexpectedEOF:
		return "unexpected_eof"
	case f.eof:
		return "eof"
	}
	return typeName(unwrapPlain(err))
}

// found is what one walk of an error tree finds for errorType's rules.
type found struct {
	named         string // from the outermost ErrorType() method
	status        int    // of the outermost *retry.ResponseError
	sqlState      string // of the outermost SQLState() method
	errno         string // the name of a known errno
	timeout       bool
	canceled      bool
	unexpectedEOF bool
	eof           bool
}

// maxDepth bounds the walk, so that a cyclic or absurdly deep tree cannot
// hang or overflow the stack of the goroutine that called retry.Do.
const maxDepth = 64

// walk notes what err and the errors it wraps hold, depth first, outermost
// first, as errors.Is walks them.
func (f *found) walk(err error, depth int) {
	if err == nil || depth > maxDepth {
		return
	}
	if isNilPointer(err) {
		return
	}
	if n, ok := err.(interface{ ErrorType() string }); ok && f.named == "" {
		f.named = n.ErrorType()
	}
	if re, ok := err.(*retry.ResponseError); ok && f.status == 0 && re != nil {
		f.status = re.StatusCode
	}
	if s, ok := err.(interface{ SQLState() string }); ok && f.sqlState == "" {
		f.sqlState = s.SQLState()
	}
	if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
		f.timeout = true
	}
	switch err {
	case context.DeadlineExceeded:
		f.timeout = true
	case context.Canceled:
		f.canceled = true
	case io.ErrUnexpectedEOF:
		f.unexpectedEOF = true
	case io.EOF:
		f.eof = true
	}
	if errno, ok := err.(syscall.Errno); ok && f.errno == "" {
		f.errno = errnoName(errno)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		f.walk(u.Unwrap(), depth+1)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			f.walk(e, depth+1)
		}
	}
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ECONNRESET:
		return "connection_reset"
	case syscall.ECONNREFUSED:
		return "connection_refused"
	case syscall.ECONNABORTED:
		return "connection_aborted"
	case syscall.EPIPE:
		return "broken_pipe"
	}
	return ""
}

// statusNames holds the HTTP status codes as strings, so that naming one
// does not allocate.
var statusNames = func() (s [600]string) {
	for i := 100; i < len(s); i++ {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func statusName(code int) string {
	if code >= 100 && code < len(statusNames) {
		return statusNames[code]
	}
	return strconv.Itoa(code)
}

// The wrapper types unwrapPlain looks through. fmt's and retry's are
// unexported, so they are known by an instance.
var (
	fmtWrapper   = reflect.TypeOf(fmt.Errorf("%w", io.EOF))
	retryWrapper = reflect.TypeOf(retry.RetryAfter(io.EOF, 0))
)

// unwrapPlain returns the innermost error of a chain of wrappers that add
// context to an error but say nothing of what failed.
func unwrapPlain(err error) error {
	for range maxDepth {
		if isNilPointer(err) {
			return err
		}
		var next error
		switch e := err.(type) {
		case *url.Error:
			next = e.Err
		case *net.OpError:
			next = e.Err
		case *os.SyscallError:
			next = e.Err
		default:
			if t := reflect.TypeOf(err); t == fmtWrapper || t == retryWrapper {
				next = errors.Unwrap(err)
			} else {
				next = transparent(err)
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
	return err
}

// transparent returns the error that err wraps when err is a wrapper with
// nothing of its own to say: its type is unexported, it wraps exactly one
// error, and its text is that error's text. Else it returns nil.
//
// Integrations wrap each attempt's error in a type of their own, to answer a
// question the error cannot (retryhttp's, whether a round trip's outcome is
// unknown; retrygrpc's, what it knows of the gRPC call), and net/http does
// the same inside (nothingWrittenError). Their type names how the error was
// carried, not what failed, and the same failure must have the same
// error.type however it reached the loop: through retryhttp, through an
// http.Client, or bare. What such wrappers have in common, whoever wrote
// them, is that nobody outside their package can name them (errors.As
// cannot target them) and that they read as their cause: so no list of
// their types, nor a method each would have to add, is needed. An exported
// type is API that a caller matches, and keeps its name whatever its text.
// A type that means something of its own while reading as its cause names
// itself with an ErrorType method, which comes first.
//
// Comparing the texts calls Error twice, which may allocate; the rule is
// reached only for an unexported wrapper around a failure that none of the
// short names covers, such as a TLS or DNS error, which the default
// classifier does not retry.
func transparent(err error) error {
	u, ok := err.(interface{ Unwrap() error })
	if !ok || exported(reflect.TypeOf(err)) {
		return nil
	}
	next := u.Unwrap()
	if next == nil || isNilPointer(next) || next.Error() != err.Error() {
		return nil
	}
	return next
}

// exported reports whether t, or the type t points to, is a named type that
// other packages can name.
func exported(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	r, _ := utf8.DecodeRuneInString(t.Name())
	return unicode.IsUpper(r)
}

// isNilPointer reports whether err is a nil pointer returned as an error,
// such as a (*url.Error)(nil): its methods would panic.
func isNilPointer(err error) bool {
	v := reflect.ValueOf(err)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// typeName names err's type as OpenTelemetry's semconv.ErrorType does: the
// package path and name of a named type, else the type as Go prints it
// ("*url.Error").
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if pkg, name := t.PkgPath(), t.Name(); pkg != "" && name != "" {
		return pkg + "." + name
	}
	return t.String()
}
