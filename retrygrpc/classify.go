package retrygrpc

import (
	"errors"
	"strings"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultClassifier holds the rules the interceptors use when their Policy's
// Classifier is nil: which gRPC status codes are worth another attempt. It is
// exported so that a Policy can build on it, for instance to retry INTERNAL
// as well:
//
//	retry.Classifiers(retrygrpc.DefaultClassifier, func(err error) retry.Decision {
//		if status.Code(err) == codes.Internal {
//			return retry.Retry
//		}
//		return retry.Undecided
//	})
//
// It finds the status of the first error in err's tree that has one, as
// [status.FromError] does, and answers:
//
//   - UNAVAILABLE: Retry. The service could not take the call: a connection
//     that failed or broke, a server shutting down, a proxy with no backend.
//     This is the code gRFC A6 retries by default.
//   - DEADLINE_EXCEEDED: Retry. The loop has already stopped if the caller's
//     deadline passed, so this is an attempt's own timeout
//     (Policy.AttemptTimeout) or a shorter deadline on the server's side.
//   - RESOURCE_EXHAUSTED: Retry only if the server sent a
//     grpc-retry-pushback-ms delay with it; Stop otherwise. A server that
//     sheds load says when to come back; without that, the code usually
//     means a quota that will not refill for a while, or a message larger
//     than a limit (grpc-go reports both sides' size limits with it).
//   - CANCELLED: Stop. If the caller cancelled, the loop has stopped before
//     asking; otherwise the server or a proxy cancelled the call on purpose.
//   - ABORTED: Stop. A conflict (a failed test-and-set, an aborted
//     transaction) is resolved by redoing the read-modify-write sequence
//     above this call, not by sending the same request again.
//   - INTERNAL, UNKNOWN, DATA_LOSS: Stop. Broken invariants, a server error
//     it did not classify, lost data: the next attempt is likely to fail the
//     same way, and the call may have done part of its work. Opt in as
//     shown above when your service documents otherwise.
//   - INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
//     FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED:
//     Stop. The request, its target or its credentials are wrong, and
//     sending it again changes nothing.
//   - any other code (there is none today): Stop.
//   - an error with no gRPC status (one an interceptor below this one made
//     up, say): what [retry.DefaultClassifier] says.
//
// Before the table, as retry.DefaultClassifier does, it stops on an error
// that already came out of a retry loop (a [*retry.Error] in the tree, as
// every error these interceptors give up with holds): a retry.Do around a
// call through them must not multiply their attempts.
//
// Each failed attempt's error also answers for itself with this table,
// through a method RetryDecision() retry.Decision, which
// [retry.DefaultClassifier] asks before its own rules. So one Policy shared
// with retry.Do and retryhttp, with Classifier retry.Classifiers(mine,
// retry.DefaultClassifier), applies the gRPC table wherever mine has no
// opinion; DefaultClassifier and that method are the same code, so they
// cannot disagree.
//
// These rules say whether another attempt could succeed, not whether it is
// safe: the interceptors never repeat a call that may have taken effect
// unless its method is declared idempotent, whatever the classifier says
// (see the package documentation). DefaultClassifier is safe for concurrent
// use.
func DefaultClassifier(err error) retry.Decision {
	if fromLoop(err) {
		return retry.Stop
	}
	if ae, ok := findAttempt(err); ok {
		return ae.RetryDecision()
	}
	if s, ok := status.FromError(err); ok && s != nil {
		return codeDecision(s.Code(), noPushback)
	}
	return retry.DefaultClassifier(err)
}

// codeDecision is the code table of DefaultClassifier, given what the
// server's pushback said.
func codeDecision(code codes.Code, pb pushback) retry.Decision {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return retry.Retry
	case codes.ResourceExhausted:
		if pb == pushedBack {
			return retry.Retry
		}
	}
	return retry.Stop
}

// attemptError is the error of one failed attempt, with what the interceptor
// knows about it beyond its status: whether the call left the client, and
// what the server's pushback said. It reads as the error gRPC returned, and
// errors.Is, errors.As and status.FromError reach that error.
type attemptError struct {
	err      error
	code     codes.Code
	sent     bool // a stream was opened for it: the server may have seen it
	pushback pushback
	// clientMade: grpc-go made the status on the client after the request
	// left, so it says nothing about what the server did.
	clientMade bool
	// unsafe: the attempt may have taken effect and its method is not
	// declared idempotent.
	unsafe bool
	// grpcRetried: grpc-go's own retries are on for the method, so the
	// attempt was a whole retry loop of grpc-go's.
	grpcRetried bool
}

func (e *attemptError) Error() string { return e.err.Error() }

// Throttled reports whether the server said it is overloaded:
// RESOURCE_EXHAUSTED from the server itself, or a pushback. A limiter that
// learns from attempts (package adaptive) slows down on it; a
// RESOURCE_EXHAUSTED that grpc-go made on the client (a reply over its
// receive limit) says nothing about the server's load.
func (e *attemptError) Throttled() bool {
	return (e.code == codes.ResourceExhausted && !e.clientMade) || e.pushback == pushedBack
}
func (e *attemptError) Unwrap() error { return e.err }

// RetryDecision answers for the attempt with the code table of
// [DefaultClassifier], which the core's retry.DefaultClassifier asks first:
// so a Policy whose Classifier is retry.Classifiers(mine,
// retry.DefaultClassifier), shared with retry.Do and retryhttp, applies the
// gRPC table wherever mine has no opinion.
func (e *attemptError) RetryDecision() retry.Decision {
	return codeDecision(e.code, e.pushback)
}

// Unrepeatable returns why the attempt must not be repeated, if it must
// not: retry.ErrNotRetryable when the server's pushback said not to retry
// (gRFC A6), retry.ErrAlreadyRetried when grpc-go's own retries are on for
// the method (the attempt was their whole loop), retry.ErrNotIdempotent when
// it may have taken effect and its method is not declared idempotent. These
// are rules of safety, which the loop applies whatever the classifier says,
// and reports as the reason the call stopped; in a hedged call they end the
// hedging, and the attempts in flight may still win.
func (e *attemptError) Unrepeatable() error {
	switch {
	case e.pushback == refused:
		return retry.ErrNotRetryable
	case e.grpcRetried:
		return retry.ErrAlreadyRetried
	case e.unsafe:
		return retry.ErrNotIdempotent
	}
	return nil
}

// OutcomeUnknown reports whether the attempt may have taken effect on the
// server, which the retry loop records in retry.Error.OutcomeUnknown and the
// interceptors use to refuse repeating a method that is not idempotent.
//
// It is false when the call never left the client (no stream was opened: a
// connection that could not be made, a load balancer with no ready
// backend), when the server turned it away with a pushback on UNAVAILABLE or
// RESOURCE_EXHAUSTED (a server asks to be called again only for a call it
// did not carry out), and for a code that is the server's definite answer
// about the request (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED,
// OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED). It is true for the codes
// that may come from a call cut off mid-way or from a server that failed
// part of the way through: CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, INTERNAL,
// UNAVAILABLE, DATA_LOSS, and any code not listed.
//
// Whatever its code, it is true for a status that grpc-go made on the
// client after the request left (see clientMade): such a status proves
// nothing about the server, which may have carried the call out.
func (e *attemptError) OutcomeUnknown() bool {
	if !e.sent {
		return false
	}
	if e.clientMade {
		return true
	}
	switch e.code {
	case codes.Unavailable, codes.ResourceExhausted:
		if e.pushback == pushedBack {
			return false
		}
		return e.code == codes.Unavailable
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.Aborted, codes.OutOfRange, codes.Unimplemented,
		codes.Unauthenticated:
		return false
	}
	return true
}

// clientMade reports whether err's status is one that grpc-go (v1.85, read
// in its source) makes on the client while receiving the response, or from
// the server's HTTP/2 stream reset: a reply over the client's receive limit
// (RESOURCE_EXHAUSTED, the 4 MiB default included), a reply that cannot be
// decompressed or decoded, a unary reply with no message or with two
// (INTERNAL), and a stream that the server's HTTP/2 layer reset with any code
// but REFUSED_STREAM (RESOURCE_EXHAUSTED for ENHANCE_YOUR_CALM and
// FLOW_CONTROL, PERMISSION_DENIED for INADEQUATE_SECURITY, INTERNAL...),
// which grpc-go's transparent retry already handles as unprocessed. They are
// recognised by their text, as grpc-go gives no other sign.
//
// A gRPC server's own receive limit reports a request that is too large with
// the same text as the client's limit; so that answer counts as an unknown
// outcome too. That can only keep a call from being repeated, never make
// one repeat: the code table stops on RESOURCE_EXHAUSTED without a pushback.
func clientMade(err error) bool {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return false
	}
	msg := gs.GRPCStatus().Message()
	if rest, ok := strings.CutPrefix(msg, "stream terminated by RST_STREAM with error code: "); ok {
		return rest != "REFUSED_STREAM"
	}
	for _, prefix := range clientMadePrefixes {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// clientMadePrefixes begin the messages of the statuses grpc-go's client
// makes while receiving a response (rpc_util.go and stream.go in v1.85).
var clientMadePrefixes = [...]string{
	"grpc: received message larger than max",                     // the receive limit, before decompression
	"grpc: message after decompression larger than max",          // the receive limit, after
	"grpc: received message after decompression larger than max", // the same, with an encoding.Compressor
	"grpc: failed to decompress the",
	"grpc: failed to read decompressed data",
	"grpc: no decompressor available",
	"grpc: Decompressor is not installed",
	"grpc: compressed flag set with identity or empty encoding",
	"grpc: received unexpected payload format",
	"grpc: peer compressed the response",
	"grpc: failed to unmarshal the received message",
	"cardinality violation: ",
}

// fromLoop reports whether err's tree holds a *retry.Error.
func fromLoop(err error) bool {
	for err != nil {
		if _, ok := err.(*retry.Error); ok {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if fromLoop(inner) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// findAttempt returns the first *attemptError in err's tree.
func findAttempt(err error) (*attemptError, bool) {
	for err != nil {
		if ae, ok := err.(*attemptError); ok {
			return ae, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if ae, ok := findAttempt(inner); ok {
					return ae, true
				}
			}
			return nil, false
		default:
			return nil, false
		}
	}
	return nil, false
}
