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
//
// For a hedged call it also detaches the attempt from the core's context for
// it, which the core ends as the attempt returns (a winner's included) or
// when another attempt wins: the round trip runs on the request's own
// context, with the attempt's values, and the guard passes the core's
// cancellation on only until the response arrives (unlink), so that the
// winner's body can be read after RoundTrip returns.
type guard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // nil without a timeout
	unlink func() bool // nil unless detached; stops passing the attempt's cancellation on
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

// newDetachedGuard is a guard for an attempt of a hedged call: it runs on req
// (the request's own context, which bounds the whole call), takes its values
// from attempt (the core's context for the attempt: its number), and ends
// when attempt does, until the response arrives.
func newDetachedGuard(req, attempt context.Context, timeout time.Duration) *guard {
	g := newGuard(detached{Context: req, values: attempt}, timeout)
	g.unlink = context.AfterFunc(attempt, func() { g.cancel(context.Cause(attempt)) })
	return g
}

// detached is a context that ends as Context does, with the values of
// values.
type detached struct {
	context.Context
	values context.Context
}

func (d detached) Value(key any) any { return d.values.Value(key) }

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

// stop stops the timer and the passing on of the attempt's cancellation,
// and reports which had already fired: the attempt timed out, or the core
// ended it (another attempt won, or the call stopped).
func (g *guard) stop() (expired, cut bool) {
	expired = g.timer != nil && !g.timer.Stop()
	cut = g.unlink != nil && !g.unlink()
	return expired, cut
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
	expired, cut := g.stop()
	if cut && !expired {
		// The core ended the attempt as its answer came: it lost, or the
		// call stopped. Its response is not wanted.
		g.release()
		if err == nil {
			if resp.Body != nil {
				resp.Body.Close()
			}
			return nil, context.Cause(g.ctx)
		}
		return nil, err
	}
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
