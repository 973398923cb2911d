package retryhttp

import (
	"context"
	"io"
	"net/http"
	"time"
)

// errTimeout is the cause of a request's context when Transport.Timeout
// passes.
var errTimeout error = timeoutError("retryhttp: Transport.Timeout exceeded")

// withTimeout returns a copy of req whose context ends timeout from now, or,
// for a redirect, when the request that led to it had to end, as
// http.Client.Timeout counts redirects in the same time. That deadline is
// read from the context of the previous hop's request, which every response
// keeps, with or without a body (a redirect's body is often empty).
func withTimeout(req *http.Request, timeout time.Duration) (*http.Request, context.CancelFunc) {
	deadline := time.Now().Add(timeout)
	for prev := req.Response; prev != nil && prev.Request != nil; prev = prev.Request.Response {
		if d, ok := prev.Request.Context().Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadlineCause(req.Context(), deadline, errTimeout)
	return req.WithContext(ctx), cancel
}

// bound makes release run when resp's body is read to its end or closed, so
// that the timeout goes on bounding the body, as http.Client.Timeout does;
// without a body to read, release runs now.
func bound(resp *http.Response, req *http.Request, release context.CancelFunc) *http.Response {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		release()
		return resp
	}
	b := &timedBody{body: resp.Body, release: release}
	if w, ok := resp.Body.(io.Writer); ok {
		resp.Body = rwTimedBody{b, w} // a 101 Switching Protocols body
	} else {
		resp.Body = b
	}
	return resp
}

// timedBody is the body of a response returned under Transport.Timeout.
type timedBody struct {
	body    io.ReadCloser
	release context.CancelFunc
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *timedBody) Close() error {
	err := b.body.Close()
	b.release()
	return err
}

type rwTimedBody struct {
	*timedBody
	w io.Writer
}

func (b rwTimedBody) Write(p []byte) (int, error) { return b.w.Write(p) }
