package retrygrpc

import (
	"context"
	"errors"
	"strconv"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// callError is what a call returns when the retry loop gives up: the core's
// *retry.Error (errors.As reaches it, and through it the last attempt's error
// and the stop reason), with the gRPC status that gRPC itself would have
// given the caller, so that status.Code and status.FromError work as they do
// without the interceptors.
type callError struct {
	err    *retry.Error
	status *status.Status
}

func (e *callError) Error() string              { return e.err.Error() }
func (e *callError) Unwrap() error              { return e.err }
func (e *callError) GRPCStatus() *status.Status { return e.status }

// callFailed turns the loop's error into the call's. The status is the
// context's (CANCELLED or DEADLINE_EXCEEDED, as gRPC reports them) when the
// caller's context ended the call, and otherwise the last attempt's,
// unchanged: its code, message and details are the server's. Giving up
// before the deadline because no attempt could fit (retry.ErrNoTimeLeft)
// keeps the last attempt's status, which says what went wrong; with no
// attempt at all, the status is DEADLINE_EXCEEDED, as if the deadline had
// come. A call that the policy's Breaker or Concurrency stopped before any
// attempt is UNAVAILABLE, the code grpc-go itself gives a call that its
// client-side circuit breaking or load balancer drops: nothing was sent,
// and the service may be reached later; after an attempt, such a stop keeps
// the last attempt's status, as the loop's other reasons do.
func callFailed(ctx context.Context, err error) error {
	var re *retry.Error
	if !errors.As(err, &re) {
		return err
	}
	st := lastStatus(re)
	switch {
	case re.Last == nil && errors.Is(re.Reason, retry.ErrNoTimeLeft):
		st = status.New(codes.DeadlineExceeded, re.Error())
	case re.Last == nil && (errors.Is(re.Reason, retry.ErrBreakerOpen) || errors.Is(re.Reason, retry.ErrNoSlot)):
		st = status.New(codes.Unavailable, re.Error())
	case errors.Is(re.Reason, retry.ErrNoTimeLeft), errors.Is(re.Reason, retry.ErrExhausted),
		errors.Is(re.Reason, retry.ErrNotRetryable), errors.Is(re.Reason, retry.ErrBudgetExhausted),
		errors.Is(re.Reason, retry.ErrServerDelay), errors.Is(re.Reason, retry.ErrAlreadyRetried),
		errors.Is(re.Reason, retry.ErrNotIdempotent), errors.Is(re.Reason, retry.ErrBreakerOpen),
		errors.Is(re.Reason, retry.ErrNoSlot):
		// The loop's own reasons: the last attempt's status says what went
		// wrong, even if the caller's context has ended since.
	case ctx.Err() != nil:
		st = status.FromContextError(ctx.Err())
	case errors.Is(re.Reason, context.DeadlineExceeded):
		// The deadline has come, its timer has not fired yet.
		st = status.FromContextError(context.DeadlineExceeded)
	}
	return &callError{err: re, status: st}
}

// lastStatus returns the status of the last attempt's error, or UNKNOWN with
// the loop's message when there is none.
func lastStatus(re *retry.Error) *status.Status {
	// Not status.FromError(re.Last), which would replace the message with
	// the text of the wrappers around the status.
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(re.Last, &gs) {
		if st := gs.GRPCStatus(); st != nil {
			return st
		}
	}
	return status.New(codes.Unknown, re.Error())
}

// previousAttemptsKey is the request metadata in which a retry tells the
// server how many attempts came before it (gRFC A6, "Exposed Retry
// Metadata"). grpc-go lets it through from outgoing metadata on purpose.
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// withPreviousAttempts adds grpc-previous-rpc-attempts to an attempt's
// outgoing metadata.
func withPreviousAttempts(ctx context.Context, n int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(n))
}
