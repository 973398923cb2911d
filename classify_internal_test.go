package retry

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
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idError is an error with an identity, which may wrap another. Its
// identity is the server delay it carries, so that the walk's choice of the
// outermost delay shows which error it found first.
type idError struct {
	id    int
	inner error
}

func (e *idError) Error() string              { return fmt.Sprint("id ", e.id) }
func (e *idError) Unwrap() error              { return e.inner }
func (e *idError) serverDelay() time.Duration { return time.Duration(e.id) }

// multi is an error with several causes, nil ones included.
type multi []error

func (m multi) Error() string   { return "multi" }
func (m multi) Unwrap() []error { return m }

// unwrapsToNil has an Unwrap method that returns nil.
type unwrapsToNil struct{}

func (unwrapsToNil) Error() string { return "unwraps to nil" }
func (unwrapsToNil) Unwrap() error { return nil }

// The walk takes the first error of a kind in the order errors.As finds it
// (depth first, pre-order), as the outermost marker and delay rules need.
func TestWalkOrderMatchesErrorsAs(t *testing.T) {
	t.Parallel()
	plain := errors.New("plain")
	id1, id2, id3 := &idError{id: 1}, &idError{id: 2}, &idError{id: 3}
	outer := &idError{id: 4, inner: id1}
	tests := []struct {
		name string
		err  error
		want *idError // nil: none
	}{
		{"nil", nil, nil},
		{"plain", plain, nil},
		{"leaf", id1, id1},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", id1)), id1},
		{"outer before inner", outer, outer},
		{"join: first in order", errors.Join(plain, id1, id2), id1},
		{"join: depth first", errors.Join(errors.Join(plain, fmt.Errorf("w: %w", id2)), id1), id2},
		{"wrapped join", fmt.Errorf("w: %w", errors.Join(plain, id3)), id3},
		{"fmt with two %w", fmt.Errorf("%w and %w", plain, id2), id2},
		{"nil entries skipped", multi{nil, plain, nil, id3}, id3},
		{"empty multi", multi{}, nil},
		{"Unwrap returns nil", fmt.Errorf("w: %w", unwrapsToNil{}), nil},
		{"join after a dead end", errors.Join(unwrapsToNil{}, id1), id1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			var viaAs *idError
			asOK := errors.As(tt.err, &viaAs)
			require.Equal(t, want != nil, asOK, "precondition: errors.As agrees with the table")
			require.Equal(t, want, viaAs, "precondition: errors.As agrees with the table")

			f := inspect(tt.err)
			assert.Equal(t, want != nil, f.delayed, "inspect(%v).delayed = %v, want %v", tt.err, f.delayed, want != nil)
			if want != nil {
				assert.Equal(t, time.Duration(want.id), f.delay, "inspect(%v) found id %d, want %d", tt.err, f.delay, want.id)
			}
		})
	}
}

func TestInspectDoesNotAllocate(t *testing.T) {
	tree := errors.Join(errors.New("a"), fmt.Errorf("b: %w", multi{io.EOF, &idError{id: 1}}))
	var f facts
	allocs := testing.AllocsPerRun(100, func() { f = inspect(tree) })
	assert.Equal(t, isEOF, f.set, "inspect(%v) facts = %b, want %b", tree, f.set, isEOF)
	assert.Zero(t, allocs, "inspect allocates %v times, want 0", allocs)
}

func TestUnmark(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	wrappedMarker := fmt.Errorf("w: %w", Permanent(inner))
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"unmarked", inner, inner},
		{"Permanent", Permanent(inner), inner},
		{"Transient", Transient(inner), inner},
		{"nested markers", Permanent(Transient(Permanent(inner))), inner},
		// A marker under the caller's own wrapping stays: removing it would
		// mean rebuilding the caller's error.
		{"marker under a wrapper", wrappedMarker, wrappedMarker},
		{"markers around a wrapper", Transient(wrappedMarker), wrappedMarker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unmark(tt.err)
			assert.Equal(t, tt.want, got, "unmark(%v) = %#v, want %#v", tt.err, got, tt.want)
			if tt.want != nil {
				assert.Same(t, tt.want, got)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	constant := func(d Decision) Classifier { return func(error) Decision { return d } }
	nested := &Error{Attempts: 3, Reason: ErrExhausted, Last: inner}
	tests := []struct {
		name string
		c    Classifier
		err  error
		want error // nil: retry
	}{
		{"nil classifier: default retry", nil, &ResponseError{StatusCode: 503}, nil},
		{"nil classifier: default stop", nil, &ResponseError{StatusCode: 404}, ErrNotRetryable},
		{"nil classifier: default unknown retries", nil, inner, nil},
		{"Retry", constant(Retry), inner, nil},
		{"Stop", constant(Stop), inner, ErrNotRetryable},
		{"Undecided retries", constant(Undecided), inner, nil},
		{"out-of-range decision retries", constant(Decision(9)), inner, nil},
		{"Permanent over Retry", constant(Retry), Permanent(inner), ErrNotRetryable},
		{"Transient over Stop", constant(Stop), Transient(inner), nil},
		{"outermost marker", constant(Undecided), Transient(Permanent(inner)), nil},
		{"marker deep in a join", constant(Retry), errors.Join(inner, fmt.Errorf("w: %w", Permanent(inner))), ErrNotRetryable},
		{"an inner loop's error: default", nil, nested, ErrAlreadyRetried},
		{"an inner loop's error: a list with the default", Classifiers(constant(Undecided), DefaultClassifier), nested, ErrAlreadyRetried},
		{"an inner loop's error marked Permanent", nil, Permanent(nested), ErrNotRetryable},
		{"an inner loop that stopped on the error's nature", nil, &Error{Attempts: 1, Reason: ErrNotRetryable, Last: inner}, ErrNotRetryable},
		{"an inner loop that stopped on a rule of safety", nil, &Error{Attempts: 1, Reason: ErrNotIdempotent, Last: refused{ErrNotIdempotent, inner}}, ErrNotIdempotent},
		{"an inner loop's error marked Transient", nil, Transient(nested), nil},
		{"the error's own answer: stop", nil, ownDecision{Stop}, ErrNotRetryable},
		{"the error's own answer: retry, over a status", nil, fmt.Errorf("w: %w", errors.Join(ownDecision{Retry}, &ResponseError{StatusCode: 404})), nil},
		{"the error's own answer: none", nil, ownDecision{Undecided}, nil},
		{"the error's own answer, below a classifier", Classifiers(constant(Undecided), DefaultClassifier), ownDecision{Stop}, ErrNotRetryable},
		{"the classifier overrides the error's own answer", constant(Retry), ownDecision{Stop}, nil},
		{"unrepeatable and retryable", nil, refused{ErrNotIdempotent, &ResponseError{StatusCode: 503}}, ErrNotIdempotent},
		{"unrepeatable over Transient", nil, Transient(refused{ErrNotIdempotent, inner}), ErrNotIdempotent},
		{"unrepeatable, but not retryable anyway", nil, refused{ErrNotIdempotent, &ResponseError{StatusCode: 400}}, ErrNotRetryable},
		{"unrepeatable with no reason", nil, refused{nil, inner}, nil},
		{"an inner loop's last error answers for the inner loop only", nil,
			&Error{Attempts: 3, Reason: ErrExhausted, Last: ownDecision{Retry}}, ErrAlreadyRetried},
		{"an inner loop's refusal is the inner loop's", nil,
			&Error{Attempts: 3, Reason: ErrExhausted, Last: refused{ErrNotIdempotent, inner}}, ErrAlreadyRetried},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := inspect(tt.err)
			got := classify(tt.c, tt.err, &f)
			assert.Equal(t, tt.want, got, "classify(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

// ownDecision is an error that answers for itself, as an adapter's errors do.
type ownDecision struct{ d Decision }

func (ownDecision) Error() string             { return "own" }
func (o ownDecision) RetryDecision() Decision { return o.d }

// refused is an error whose attempt must not be repeated, for reason.
type refused struct {
	reason error
	err    error
}

func (r refused) Error() string       { return r.err.Error() }
func (r refused) Unwrap() error       { return r.err }
func (r refused) Unrepeatable() error { return r.reason }

func TestClassifyAsksNoClassifierWhenMarked(t *testing.T) {
	t.Parallel()
	calls := 0
	c := func(error) Decision { calls++; return Undecided }
	for _, err := range []error{Permanent(errors.New("x")), Transient(errors.New("x"))} {
		f := inspect(err)
		classify(c, err, &f)
	}
	assert.Zero(t, calls, "classifier called %d times, want 0", calls)
	err := errors.New("x")
	f := inspect(err)
	classify(c, err, &f)
	assert.Equal(t, 1, calls, "classifier called %d times, want 1", calls)
}

func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	op := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("x"), false},
		{"own deadline exceeded", fmt.Errorf("attempt: %w", context.DeadlineExceeded), true},
		{"canceled: the caller ended an attempt in flight", context.Canceled, true},
		{"canceled while dialling", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, false},
		{"net timeout", timeout, true},
		{"timeout under a net.Error that says no", &url.Error{Op: "Get", URL: "http://x", Err: fmt.Errorf("broken: %w", timeout)}, true},
		{"ECONNRESET", op(syscall.ECONNRESET), true},
		{"ECONNABORTED", op(syscall.ECONNABORTED), true},
		{"EPIPE", op(syscall.EPIPE), true},
		{"unexpected EOF", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), true},
		{"EOF from an HTTP round trip", &url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, true},
		{"bare EOF", fmt.Errorf("decode: %w", io.EOF), false},
		{"ECONNREFUSED", op(syscall.ECONNREFUSED), false},
		{"DNS not found", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, false},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, false},
		{"DNS timeout under a dial", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "x", IsTimeout: true}}, false},
		{"HTTP status", &ResponseError{StatusCode: 504}, false},
		{"TLS", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false},
		{"marked", Permanent(op(syscall.ECONNRESET)), true},
		{"join", errors.Join(errors.New("x"), op(syscall.EPIPE)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OutcomeUnknown(tt.err)
			assert.Equal(t, tt.want, got, "OutcomeUnknown(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

// same compares interface words, which is == only for sentinels whose
// dynamic type is a pointer: the others are compared with ==.
func TestSentinelsComparedAsEquality(t *testing.T) {
	for _, s := range sentinels {
		if ptr := reflect.TypeOf(s.err).Kind() == reflect.Pointer; ptr != s.ptr {
			t.Errorf("sentinel %v: ptr = %v, want %v", s.err, s.ptr, ptr)
		}
		if s.ptr && (!same(s.err, s.err) || same(errors.New(s.err.Error()), s.err)) {
			t.Errorf("same(%v) is not ==", s.err)
		}
		var f facts
		f.note(s.err, false)
		if !f.has(s.fact) {
			t.Errorf("note(%v) misses its fact", s.err)
		}
	}
	var nilErr error
	if same(nilErr, context.Canceled) || same(fmt.Errorf("wrapped: %w", context.Canceled), context.Canceled) {
		t.Error("same matched what == does not")
	}
}
