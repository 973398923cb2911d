package retrygrpc

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// StreamClientInterceptor returns a [grpc.StreamClientInterceptor] that
// retries streams with the retry loop of [retry.Do] and policy p (or the
// call's [CallPolicy]) until they are committed, as gRFC A6 defines it:
// until the first response header or message arrives. After that, an error
// is returned as it is. Install it first in the chain, with grpc-go's own
// retries off:
//
//	conn, err := grpc.NewClient(target, creds, grpc.WithDisableRetry(),
//		grpc.WithChainStreamInterceptor(retrygrpc.StreamClientInterceptor(policy)))
//
// A server-streaming call (one request, a stream of responses) is retried
// whole: the request the caller sent is sent again on a new stream. Opening
// it sends nothing: the caller's SendMsg and CloseSend are kept, and the
// loop runs in the first RecvMsg or Header, where its first attempt opens a
// stream and sends them. So the Limiter paces the first attempt, the Budget
// and the loop's clock start with it, and a call stopped before it (by the
// caller's context, or for lack of time) has sent nothing. An error before
// commit, the failure to open the stream included, comes from RecvMsg once
// retrying has stopped, as gRPC reports a stream's status. Until commit,
// Context returns the caller's context, and, unlike gRPC's, calling it does
// not stop the retrying.
//
// A client-streaming or bidirectional call is retried only while its stream
// is being opened, when nothing has been sent: its messages are never
// replayed. The package documentation says why.
//
// Policy.AttemptTimeout bounds each attempt until the stream commits, and no
// longer: a committed stream lives as long as the caller's context. A nil
// Classifier in p means [DefaultClassifier]. When retrying stops before
// commit, RecvMsg returns an error that holds a [*retry.Error] and whose gRPC
// status is the last attempt's, or the context's if the caller's context
// ended the call.
//
// The interceptor is safe for concurrent use; p's funcs and Budget must be.
// The streams it returns follow the rules of [grpc.ClientStream].
func StreamClientInterceptor(p retry.Policy, opts ...Option) grpc.StreamClientInterceptor {
	return newConfig(p, opts).stream
}

func (c *config) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s := &stream{cfg: c, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer}
	s.policy = *c.policyFor(ctx, opts)
	s.keepOptions(opts)
	// The core's AttemptTimeout would end the attempt's context when the
	// attempt function returns, cutting the stream: the guard does it.
	s.timeout, s.policy.AttemptTimeout = s.policy.AttemptTimeout, 0
	if desc.ClientStreams {
		return s.openOnly()
	}
	// A server-streaming call's first attempt is opened by the loop, at the
	// first RecvMsg or Header, with what the caller has sent by then: so the
	// limiter paces it, the budget's deposit and the loop's clock start with
	// it, and a call stopped before it has sent nothing.
	return s, nil
}

// stream is one streaming call through the interceptor, and, for a
// server-streaming call, the grpc.ClientStream handed to the caller; a
// client-streaming or bidirectional call gets its committed attempt's own.
type stream struct {
	cfg      *config
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	policy   retry.Policy
	timeout  time.Duration
	onFinish []func(error) // the caller's grpc.OnFinish callbacks, run once, when the call ends

	// fin guards the fields below, which the attempts' ends write from
	// gRPC's goroutines: it is never held while waiting.
	fin      sync.Mutex
	final    int   // the attempt whose end is the call's: 0 before commit, -1 if retrying stopped
	ended    int   // the latest attempt that ended before commit, 0 if none...
	endedErr error // ...and how

	// Before commit, mu serialises the caller's calls, and the fields below
	// belong to whichever holds it. committed is set once, after the last
	// write to them: from then on they are only read, without the lock.
	mu        sync.Mutex
	committed atomic.Bool
	attempts  int
	cur       grpc.ClientStream // the current attempt's stream; nil before the first, or if it could not open
	openErr   error             // why it could not open
	guard     *guard            // bounds the current attempt; nil without AttemptTimeout
	sent      []any             // the messages the caller sent, for each attempt to send
	closed    bool              // CloseSend was called
	err       error             // set when retrying stopped before commit: what RecvMsg returns
}

// keepOptions keeps the call's options for its attempts, but for
// grpc.OnFinish: gRPC would run it once per attempt, and it is due once per
// call, with the call's end.
func (s *stream) keepOptions(opts []grpc.CallOption) {
	s.opts = make([]grpc.CallOption, 0, len(opts)+1)
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			if f.OnFinish != nil {
				s.onFinish = append(s.onFinish, f.OnFinish)
			}
			continue
		}
		s.opts = append(s.opts, o)
	}
}

// open opens the next attempt's stream on ctx.
func (s *stream) open(ctx context.Context) {
	s.attempts++
	if s.attempts > 1 {
		ctx = withPreviousAttempts(ctx, s.attempts-1)
	}
	s.guard = newGuard(ctx, s.timeout)
	if s.guard != nil {
		ctx = s.guard.ctx
	}
	opts := s.opts
	if len(s.onFinish) > 0 || s.guard != nil {
		// gRPC tells when the attempt's stream ends, however it ends (the
		// last RecvMsg, an error, the connection's close, the caller's
		// context): then its guard is released, and the call finishes if
		// this attempt was the committed one.
		n, g := s.attempts, s.guard
		opts = append(opts[:len(opts):len(opts)], grpc.OnFinish(func(err error) {
			g.release()
			s.attemptEnded(n, err)
		}))
	}
	s.cur, s.openErr = s.streamer(ctx, s.desc, s.cc, s.method, opts...)
	if s.openErr != nil {
		s.cur = nil
		s.openErr = s.guard.explain(s.openErr)
		s.guard.release()
		s.guard = nil
	}
}

// attemptEnded is told by gRPC that attempt n's stream has ended with err.
// Only the committed attempt's end is the call's; gRPC may tell it before
// the loop has committed that attempt, so the latest end is kept until then.
func (s *stream) attemptEnded(n int, err error) {
	if len(s.onFinish) == 0 {
		return
	}
	s.fin.Lock()
	if s.final != n {
		if s.final == 0 && n > s.ended {
			s.ended, s.endedErr = n, err
		}
		s.fin.Unlock()
		return
	}
	s.fin.Unlock()
	s.finish(err)
}

// commit records that the current attempt's end is the call's, and
// finishes the call if that attempt has ended already.
func (s *stream) commit() {
	s.committed.Store(true)
	if len(s.onFinish) == 0 {
		return
	}
	s.fin.Lock()
	s.final = s.attempts
	ended, err := s.ended == s.attempts, s.endedErr
	s.fin.Unlock()
	if ended {
		s.finish(err)
	}
}

// stopped records that retrying stopped before commit with err, the call's
// end, and finishes the call.
func (s *stream) stopped(err error) {
	if len(s.onFinish) == 0 {
		return
	}
	s.fin.Lock()
	s.final = -1
	s.fin.Unlock()
	s.finish(err)
}

// finish runs the caller's OnFinish callbacks. The call's end comes once:
// the committed attempt's end, or the loop's giving up.
func (s *stream) finish(err error) {
	for _, f := range s.onFinish {
		f(err)
	}
}

// openOnly opens a client-streaming or bidirectional stream, retrying only
// the opening, when nothing has been sent yet.
func (s *stream) openOnly() (grpc.ClientStream, error) {
	err := retry.Do(s.ctx, func(ctx context.Context) error {
		s.open(ctx)
		if s.cur == nil {
			return s.cfg.judge(s.ctx, s.cc, s.method, s.openErr, false, nil, false)
		}
		if !s.guard.settle() { // it opened as its time ran out
			return s.fail(errAttemptTimeout)
		}
		return nil
	}, &s.policy, retry.Sequential) // a stream is never hedged: its attempts cannot share the caller's stream
	if err != nil {
		err = callFailed(s.ctx, err)
		s.stopped(err)
		return nil, err
	}
	s.commit()
	// Committed as it opens, the stream is the caller's: its guard is
	// released by the attempt's OnFinish, however it ends.
	return s.cur, nil
}

// run is the retry loop of a server-streaming call: each attempt opens a
// stream, sends it what the caller has sent, and calls wait, which waits for
// the attempt's first response and reports, through its error, whether the
// attempt failed before commit. It is called with mu held, and commits the
// stream, whatever the outcome.
func (s *stream) run(wait func() error) error {
	err := retry.Do(s.ctx, func(ctx context.Context) error {
		s.open(ctx)
		if s.cur == nil {
			return s.cfg.judge(s.ctx, s.cc, s.method, s.openErr, false, nil, false)
		}
		if err := s.replay(); err != nil {
			s.guard.release()
			return retry.Permanent(err)
		}
		return wait()
	}, &s.policy, retry.Sequential) // a stream is never hedged: its attempts cannot share the caller's stream
	if err != nil {
		s.err = callFailed(s.ctx, err)
		s.committed.Store(true)
		s.stopped(s.err)
		return err
	}
	s.commit()
	return nil
}

// replay sends an attempt's stream what the caller has sent.
func (s *stream) replay() error {
	for _, m := range s.sent {
		if err := s.cur.SendMsg(m); err == io.EOF {
			return nil // the stream has failed: RecvMsg tells how
		} else if err != nil {
			return err // made by the client, which will make it again
		}
	}
	if s.closed {
		s.cur.CloseSend()
	}
	return nil
}

// fail ends the current attempt, which failed with err before commit, and
// judges err.
func (s *stream) fail(err error) error {
	err = s.guard.explain(err)
	s.guard.release()
	return s.cfg.judge(s.ctx, s.cc, s.method, err, true, s.cur.Trailer(), false)
}

// RecvMsg receives the next message into m. Before commit it runs the retry
// loop until a message arrives, the stream ends, or retrying stops.
func (s *stream) RecvMsg(m any) error {
	if !s.committed.Load() {
		s.mu.Lock()
		if !s.committed.Load() {
			defer s.mu.Unlock()
			return s.recvFirst(m)
		}
		s.mu.Unlock()
	}
	if s.err != nil {
		return s.err
	}
	return s.cur.RecvMsg(m)
}

func (s *stream) recvFirst(m any) error {
	var end error // what the committed attempt's first RecvMsg returned
	if err := s.run(func() error {
		err := s.cur.RecvMsg(m)
		switch {
		case err == nil:
			if !s.guard.settle() {
				return s.fail(errAttemptTimeout)
			}
			return nil
		case err == io.EOF: // over, successfully, without a message
			end = err
			return nil
		}
		if md, _ := s.cur.Header(); md != nil {
			// The server's header had come: the stream was committed, and
			// its error is returned as it is.
			end = err
			return nil
		}
		return s.fail(err)
	}); err != nil {
		return s.err
	}
	return end
}

// Header returns the server's header. Before commit it runs the retry loop
// until a header arrives, the stream ends, or retrying stops; then, as in
// gRPC, it returns nil and no error, and RecvMsg says how the stream ended.
func (s *stream) Header() (metadata.MD, error) {
	if !s.committed.Load() {
		s.mu.Lock()
		if !s.committed.Load() {
			defer s.mu.Unlock()
			return s.headerFirst(), nil
		}
		s.mu.Unlock()
	}
	if s.err != nil {
		return nil, nil
	}
	return s.cur.Header()
}

func (s *stream) headerFirst() metadata.MD {
	var md metadata.MD
	s.run(func() error {
		h, err := s.cur.Header()
		if err != nil {
			return s.fail(err)
		}
		if h != nil {
			if !s.guard.settle() {
				return s.fail(errAttemptTimeout)
			}
			md = h
			return nil
		}
		// The stream ended without a header, so without a message either:
		// RecvMsg returns its status and decodes nothing into the probe.
		if err := s.cur.RecvMsg(new(emptypb.Empty)); err != nil && err != io.EOF {
			return s.fail(err)
		}
		return nil
	})
	return md
}

// SendMsg sends m. Before commit it keeps m, for each attempt to send when
// it opens; gRPC already forbids changing a message after sending it. Its
// errors are those of gRPC's streams: for a server-streaming call, nil
// before commit, where an error the client makes in sending comes from
// RecvMsg; otherwise io.EOF once the stream has failed (RecvMsg says how),
// or an error the client made.
func (s *stream) SendMsg(m any) error {
	if !s.committed.Load() {
		s.mu.Lock()
		if !s.committed.Load() {
			defer s.mu.Unlock()
			s.sent = append(s.sent, m)
			return nil
		}
		s.mu.Unlock()
	}
	if s.err != nil {
		return nil // a server-streaming call's: RecvMsg says why it failed
	}
	return s.cur.SendMsg(m)
}

// CloseSend closes the sending side of the stream; before commit, each
// attempt closes it once it has sent what the caller sent. It always returns
// nil, as gRPC's does.
func (s *stream) CloseSend() error {
	if !s.committed.Load() {
		s.mu.Lock()
		if !s.committed.Load() {
			defer s.mu.Unlock()
			s.closed = true
			return nil
		}
		s.mu.Unlock()
	}
	if s.err == nil {
		s.cur.CloseSend()
	}
	return nil
}

// Trailer returns the server's trailer, once RecvMsg has returned an error.
func (s *stream) Trailer() metadata.MD {
	if !s.committed.Load() {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if s.cur == nil {
		return nil
	}
	return s.cur.Trailer()
}

// Context returns the stream's context: once the stream has committed, the
// committed attempt's (which carries the peer, as gRPC's does); before, the
// caller's context, since no attempt may be open yet. Unlike gRPC's,
// calling it before commit does not stop the retrying.
func (s *stream) Context() context.Context {
	if !s.committed.Load() || s.cur == nil {
		return s.ctx
	}
	return s.cur.Context()
}
