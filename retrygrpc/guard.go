package retrygrpc

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// guard bounds one stream attempt with Policy.AttemptTimeout until the stream
// is committed. The core's AttemptTimeout cannot do it: it ends the
// attempt's context when the attempt function returns, and a stream outlives
// that. A timer cancels the attempt's context if the stream has not
// committed in time; once it has, the timer is stopped and the context lives
// on with the stream, until the stream ends, however it ends: gRPC's
// OnFinish for the attempt releases it then.
type guard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

// newGuard returns a guard for an attempt starting now, or nil when there is
// no timeout or the caller's deadline comes first: then the caller's context
// alone bounds the attempt, and its error is the caller's, as in the core.
func newGuard(parent context.Context, timeout time.Duration) *guard {
	if timeout <= 0 {
		return nil
	}
	if d, ok := parent.Deadline(); ok && time.Until(d) <= timeout {
		return nil
	}
	g := &guard{}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	g.timer = time.AfterFunc(timeout, g.expire)
	return g
}

// errAttemptTimeout is the cause of an attempt's context that the guard
// ended.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded,
	"retrygrpc: the stream did not commit within the policy's AttemptTimeout")

func (g *guard) expire() { g.cancel(errAttemptTimeout) }

// settle stops the timer at commit. It reports false if the timer fired
// first: the stream is being cut, and the attempt counts as timed out.
func (g *guard) settle() bool {
	return g == nil || g.timer.Stop()
}

// release stops the timer and ends the attempt's context. A nil guard has
// nothing to release.
func (g *guard) release() {
	if g != nil {
		g.timer.Stop()
		g.cancel(nil)
	}
}

// explain returns the attempt's error as the caller should see it: gRPC
// reports a context that the guard ended as CANCELLED, which is not retried,
// so it becomes the guard's DEADLINE_EXCEEDED.
func (g *guard) explain(err error) error {
	if g != nil && context.Cause(g.ctx) == errAttemptTimeout {
		return errAttemptTimeout
	}
	return err
}
