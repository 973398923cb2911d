package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// guard bounds one attempt with Policy.AttemptTimeout until the response
// headers arrive. A timer cancels the attempt's context if they have not
// arrived in time; once they have, the timer is stopped and the context
// lives on until the body is read to its end or closed, so that the caller
// reads the body of the returned response at its own pace. The guard is
// then the response's body, to release the context.

type guard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // nil without a timeout
	body   io.ReadCloser
}

func newGuard(parent context.Context, timeout time.Duration) *guard {
	g := &guard{}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	if timeout > 0 {
		g.timer = time.AfterFunc(timeout, g.expire)
	}
	return g
}

// errAttemptTimeout ends an attempt whose response headers did not arrive
// within Policy.AttemptTimeout. It is a timeout, as the core's own attempt
// timeout is: errors.Is(err, context.DeadlineExceeded) holds, so the default
// classifier retries it and the outcome counts as unknown.
var errAttemptTimeout error = timeoutError("retryhttp: no response headers within the policy's AttemptTimeout")

// timeoutError is the cause of a context that a timeout of retryhttp's
// ended: a net.Error that timed out, and context.DeadlineExceeded to
// errors.Is.
type timeoutError string

func (e timeoutError) Error() string      { return string(e) }
func (timeoutError) Timeout() bool        { return true }
func (timeoutError) Temporary() bool      { return true }
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

func (g *guard) expire() { g.cancel(errAttemptTimeout) }

// release stops the timer and ends the attempt's context.
func (g *guard) release() {
	g.stop()
	g.cancel(nil)
}

// stop stops the timer, and reports whether it had already fired: the
// attempt timed out.
func (g *guard) stop() (expired bool) {
	return g.timer != nil && !g.timer.Stop()
}

// Read reads the body; at its end, or on any error, the context is
// released: net/http has put the connection back in the pool by the time
// Read returns io.EOF.
func (g *guard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if err != nil {
		g.release()
	}
	return n, err
}

// Close closes the body and releases the context.
func (g *guard) Close() error {
	err := g.body.Close()
	g.release()
	return err
}

// rwGuard is the guard of a body that can also be written to, as the body
// of a 101 Switching Protocols response is: http.Client and WebSocket
// libraries look for an io.ReadWriteCloser.
type rwGuard struct {
	*guard
	w io.Writer
}

func (g rwGuard) Write(p []byte) (int, error) { return g.w.Write(p) }

// settle stops the timer once the attempt's base RoundTrip has returned.
// With a response in time it makes the guard the response's body, so that
// the context is released when the caller closes it. Otherwise it releases
// the context now, and a response that arrived as the timer fired (its body
// is being cut) counts as a timeout.
func (g *guard) settle(resp *http.Response, err error) (*http.Response, error) {
	expired := g.stop()
	if err == nil && !expired {
		if resp.Body == nil || resp.Body == http.NoBody {
			g.release()
			return resp, nil
		}
		g.body = resp.Body
		if w, ok := resp.Body.(io.Writer); ok {
			resp.Body = rwGuard{g, w}
		} else {
			resp.Body = g
		}
		return resp, nil
	}
	g.release()
	if !expired {
		return resp, err
	}
	if err == nil {
		if resp.Body != nil {
			resp.Body.Close()
		}
		return nil, errAttemptTimeout
	}
	// A base that reports the context's error rather than its cause would
	// make the timeout look like a cancellation, which is not retried.
	if errors.Is(err, context.Canceled) {
		err = errAttemptTimeout
	}
	return nil, err
}
