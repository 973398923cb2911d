package retryotel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
)

type namedError struct{ name string }

func (e namedError) Error() string     { return "named: " + e.name }
func (e namedError) ErrorType() string { return e.name }

type sqlError struct{ state string }

func (e *sqlError) Error() string    { return "sql: " + e.state }
func (e *sqlError) SQLState() string { return e.state }

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }

// carrier wraps an error to carry something the error cannot say, and reads
// as that error, as retryhttp's and retrygrpc's attempt errors do.
type carrier struct{ err error }

func (e *carrier) Error() string { return e.err.Error() }
func (e *carrier) Unwrap() error { return e.err }

// Relay reads as the error it wraps too, but is exported: a caller can
// match it with errors.As, so it is a name worth keeping.
type Relay struct{ err error }

func (e *Relay) Error() string { return e.err.Error() }
func (e *Relay) Unwrap() error { return e.err }

// annotated wraps an error and says something of its own.
type annotated struct{ err error }

func (e *annotated) Error() string { return "quota: " + e.err.Error() }
func (e *annotated) Unwrap() error { return e.err }

// cycle is an error that wraps itself: the walk must stop.
type cycle struct{ self error }

func (c *cycle) Error() string { return "cycle" }
func (c *cycle) Unwrap() error { return c.self }

func TestErrorType(t *testing.T) {
	t.Parallel()
	loop := &cycle{}
	loop.self = loop
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: os.NewSyscallError("connect", err)}}
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"an ErrorType method wins", fmt.Errorf("wrapped: %w", errors.Join(syscall.ECONNRESET, namedError{"quota"})), "quota"},
		{"the outermost ErrorType method", namedError{"outer"}, "outer"},
		{"an empty ErrorType falls through", errors.Join(namedError{""}, io.ErrUnexpectedEOF), "unexpected_eof"},
		{"HTTP status", retry.RetryAfter(&retry.ResponseError{StatusCode: 503}, time.Second), "503"},
		{"HTTP status outside the table", &retry.ResponseError{StatusCode: 999}, "999"},
		{"a status beats a timeout", errors.Join(context.DeadlineExceeded, &retry.ResponseError{StatusCode: 429}), "429"},
		{"SQLSTATE", fmt.Errorf("tx: %w", &sqlError{"40001"}), "40001"},
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"net timeout", dial(timeoutError{}), "timeout"},
		{"ETIMEDOUT", dial(syscall.ETIMEDOUT), "timeout"},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), "canceled"},
		{"reset", dial(syscall.ECONNRESET), "connection_reset"},
		{"refused", dial(syscall.ECONNREFUSED), "connection_refused"},
		{"aborted", syscall.ECONNABORTED, "connection_aborted"},
		{"broken pipe", syscall.EPIPE, "broken_pipe"},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), "unexpected_eof"},
		{"EOF", &url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, "eof"},
		{"another errno is its type", dial(syscall.ENETUNREACH), "syscall.Errno"},
		{"a DNS error is its type", dial(&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}), "*net.DNSError"},
		{"a certificate error is its type", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, "crypto/x509.UnknownAuthorityError"},
		{"a plain error is its type", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.New("c"))), "*errors.errorString"},
		{"a joined error is the join's type", errors.Join(errors.New("a"), errors.New("b")), "*errors.joinError"},
		{"a cycle", loop, "*retryotel.cycle"},
		{"a wrapper that reads as its cause is looked through", &carrier{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, "*tls.CertificateVerificationError"},
		{"through several, and the plain ones between", &carrier{&net.OpError{Op: "dial", Err: &carrier{&net.DNSError{Err: "no such host"}}}}, "*net.DNSError"},
		{"an exported wrapper is its type", &Relay{&net.DNSError{Err: "no such host"}}, "*retryotel.Relay"},
		{"a wrapper with text of its own is its type", &annotated{errors.New("c")}, "*retryotel.annotated"},
		{"a wrapper of nothing is its type", &carrier{}, "*retryotel.carrier"},
		{"a wrapper of a nil pointer is its type", &carrier{(*net.DNSError)(nil)}, "*retryotel.carrier"},
		{"a multi-error is never looked through", errors.Join(errors.New("c")), "*errors.joinError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, errorType(tt.err), "errorType(%v)", tt.err)
		})
	}
}

// A name from the fixed set costs no allocation.
func TestErrorTypeAllocs(t *testing.T) {
	err := fmt.Errorf("get: %w", retry.RetryAfter(&retry.ResponseError{StatusCode: 503}, time.Second))
	assert.Zero(t, testing.AllocsPerRun(100, func() { errorType(err) }))
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	assert.Zero(t, testing.AllocsPerRun(100, func() { errorType(reset) }))
	// An exported type behind known wrappers is named without reading any
	// error's text.
	certificate := &url.Error{Op: "Get", URL: "https://x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { errorType(certificate) }))
}

func TestErrorTypeOfNilPointer(t *testing.T) {
	var uerr *url.Error
	if got := errorType(uerr); got != "*url.Error" {
		t.Errorf("errorType((*url.Error)(nil)) = %q, want %q", got, "*url.Error")
	}
}

// The cost of naming an error: a short name, found in one walk, against the
// Go type of an error that only the fallback names, behind a wrapper that
// reads as it does (the case that compares texts):
//
//	cd retryotel && go test -run '^$' -bench ErrorType -benchmem
func BenchmarkErrorType(b *testing.B) {
	certificate := &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}
	for _, bc := range []struct {
		name string
		err  error
	}{
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}},
		{"certificate", &url.Error{Op: "Get", URL: "https://x", Err: certificate}},
		{"certificate behind a wrapper", &carrier{certificate}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				errorType(bc.err)
			}
		})
	}
}
