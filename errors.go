package retry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Error is the error Do returns when it stops without success. It keeps why
// the loop stopped and the last attempt's error, and both are reachable
// through errors.Is and errors.As:
//
//	errors.Is(err, retry.ErrBudgetExhausted) // why it stopped
//	errors.Is(err, io.ErrUnexpectedEOF)      // what the last attempt returned
type Error struct {
	// Attempts is the number of attempts made; 0 if ctx was done first.
	Attempts int
	// Elapsed is the time from the start of the call until it stopped.
	Elapsed time.Duration
	// Reason says why the loop stopped: ErrExhausted, ErrNotRetryable,
	// ErrAlreadyRetried, ErrNotIdempotent (or another reason that the last
	// error's Unrepeatable method gave), ErrBudgetExhausted, ErrServerDelay,
	// ErrNoTimeLeft, or the caller's context.Cause(ctx). Bad input that makes any attempt impossible (a nil
	// fn, a Limiter whose burst is 0) gives an error that says so.
	Reason error
	// Last is the last attempt's error, without any Permanent or Transient
	// marker; nil if no attempt was made.
	Last error
	// OutcomeUnknown is true if any attempt ended in a way that leaves open
	// whether it took effect (see the function [OutcomeUnknown] for the
	// rules): a timeout (the attempt's, the network's, or fn's own
	// context.DeadlineExceeded), a reset or aborted connection, a broken
	// pipe, an unexpected EOF, an HTTP connection closed before the response
	// came, an HTTP/2 stream reset or a GOAWAY that covered the request, a
	// database connection lost after it was made. Then the work may
	// have been done even though Do failed: reconcile before doing it again
	// by other means. Giving up is no proof that the work was not done.
	OutcomeUnknown bool
}

// Error returns a one-line summary such as "retry: gave up after 4 attempts
// (attempts exhausted): connection reset by peer"; the text after the
// parenthesis is the last error's own.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("retry: gave up ")
	switch e.Attempts {
	case 0:
		b.WriteString("before the first attempt")
	case 1:
		b.WriteString("after 1 attempt")
	default:
		b.WriteString("after " + strconv.Itoa(e.Attempts) + " attempts")
	}
	if e.Reason != nil {
		b.WriteString(" (" + strings.TrimPrefix(e.Reason.Error(), "retry: ") + ")")
	}
	switch {
	case e.Last == nil:
	case nilPointer(e.Last):
		b.WriteString(": " + fmt.Sprintf("%T(nil)", e.Last)) // its Error method would panic
	default:
		b.WriteString(": " + e.Last.Error())
	}
	return b.String()
}

// Timeout reports whether the call stopped because its time ran out: the
// caller's deadline passed, or the next attempt would not have started
// before it ([ErrNoTimeLeft]). It is false when only the last attempt timed
// out and the call stopped for another reason. With it, a *url.Error that
// wraps a *Error answers Timeout() as it does for net/http's own timeouts.
func (e *Error) Timeout() bool { return errors.Is(e.Reason, context.DeadlineExceeded) }

// Unwrap returns the stop reason and the last error, those that are not nil.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	for _, err := range [...]error{e.Reason, e.Last} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// The reasons Do stops; see [Error.Reason].
var (
	// ErrExhausted means every attempt allowed by Policy.MaxAttempts failed.
	ErrExhausted = errors.New("retry: attempts exhausted")
	// ErrNotRetryable means the last error was marked Permanent or
	// classified Stop: by its nature, another attempt would fail the same way.
	ErrNotRetryable = errors.New("retry: error not retryable")
	// ErrAlreadyRetried means the last error came out of another retry loop
	// (a nested Do, retryhttp's Transport, or a response retryhttp gave up
	// on) and the classifier stopped on it: that inner loop has spent its
	// attempts, its budget or its time, so retrying at a second layer would
	// only multiply the load (see DefaultClassifier).
	ErrAlreadyRetried = errors.New("retry: already retried by an inner loop")
	// ErrNotIdempotent means the work is not declared safe to repeat, and the
	// last attempt failed in a way that a retry might fix but that may have
	// left the work done: a retry could do it twice. An adapter stops a call
	// with it through an error whose Unrepeatable method returns it:
	// retryhttp for a request that is not idempotent (a POST without an
	// idempotency key), retrygrpc for a call that may have reached the
	// server on a method not declared idempotent.
	ErrNotIdempotent = errors.New("retry: not declared idempotent")
	// ErrBudgetExhausted means the Policy's Budget refused the retry.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")
	// ErrServerDelay means the server asked for a delay above
	// Policy.MaxRetryAfter.
	ErrServerDelay = errors.New("retry: server delay above MaxRetryAfter")
	// ErrNoTimeLeft means the next attempt would not start, after its wait,
	// at least Policy.MinAttemptTime before the caller's deadline, so Do
	// stopped instead of sleeping into it. errors.Is(ErrNoTimeLeft,
	// context.DeadlineExceeded) is true.
	ErrNoTimeLeft error = noTimeLeft{}
)

type noTimeLeft struct{}

func (noTimeLeft) Error() string        { return "retry: no time left before the deadline" }
func (noTimeLeft) Is(target error) bool { return target == context.DeadlineExceeded }

var errNilFunc = errors.New("retry: nil function")
