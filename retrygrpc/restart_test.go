package retrygrpc_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// leaveReady waits until conn is no longer ready: the client has seen its
// server go away.
func leaveReady(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	for conn.GetState() == connectivity.Ready {
		require.True(t, conn.WaitForStateChange(t.Context(), connectivity.Ready), "the connection stayed ready")
	}
}

// answer serves any of the test methods with "ok": a unary or
// server-streaming call after reading its request, a client-streaming or
// bidirectional one after reading all it sends.
func answer(ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if method != methodUpload && method != methodChat {
		return reply(ss, "ok")
	}
	for {
		var m wrapperspb.StringValue
		if err := ss.RecvMsg(&m); err == io.EOF {
			return ss.SendMsg(wrapperspb.String("ok"))
		} else if err != nil {
			return err
		}
	}
}

// call makes one call of method, of whichever kind, and returns the reply.
func call(ctx context.Context, conn *grpc.ClientConn, method string) (string, error) {
	desc := map[string]*grpc.StreamDesc{methodWatch: watchDesc, methodUpload: uploadDesc, methodChat: chatDesc}[method]
	if desc == nil {
		return invoke(ctx, conn, method)
	}
	cs, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		return "", err
	}
	if err := cs.SendMsg(wrapperspb.String("req")); err != nil && err != io.EOF {
		return "", err
	}
	if err := cs.CloseSend(); err != nil {
		return "", err
	}
	var m wrapperspb.StringValue
	err = cs.RecvMsg(&m)
	return m.GetValue(), err
}

// A call made while the server is down fails before anything is sent, so
// it is retried whatever its method, until the server is back.
func TestCallsReachARestartedServer(t *testing.T) {
	t.Parallel()
	for _, method := range []string{methodCreate, methodWatch, methodUpload, methodChat} {
		t.Run(method[len("/test.Store/"):], func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(func(_ int, ss grpc.ServerStream) error { return answer(ss) })
				lis, dial, again := nw.listen(t)
				srv := s.serveOn(lis)
				var unsent, retries int
				p := retry.Policy{MaxAttempts: -1, Backoff: retry.Constant(20 * time.Millisecond),
					Observe: func(_ context.Context, ev retry.Event) {
						if !ev.Retry {
							return
						}
						retries++
						var o interface{ OutcomeUnknown() bool }
						if errors.As(ev.Err, &o) && !o.OutcomeUnknown() && !ev.OutcomeUnknown {
							unsent++
						}
					}}
				conn := dialWith(t, dial, p)
				defer conn.Close()
				ready(t, conn)
				srv.Stop()
				leaveReady(t, conn)

				var back atomic.Pointer[running]
				timer := time.AfterFunc(100*time.Millisecond, func() { back.Store(s.serveOn(again())) })
				ctx, cancel := context.WithTimeout(t.Context(), realTimeSlack)
				defer cancel()
				begin := time.Now()
				got, err := call(ctx, conn, method)
				took := time.Since(begin)
				require.NoError(t, err)
				assert.Equal(t, "ok", got)
				assert.Equal(t, 1, s.count(), "only the attempt that reached the server")
				if exact {
					// On TCP the client's one connection attempt may take
					// until the server is back on a loaded machine.
					assert.Positive(t, retries)
				}
				assert.Equal(t, retries, unsent, "every failed attempt was known not to be sent")
				assert.GreaterOrEqual(t, took, 100*time.Millisecond)
				assert.Less(t, took, 100*time.Millisecond+realTimeSlack)

				conn.Close()
				timer.Stop()
				if srv := back.Load(); srv != nil {
					srv.Stop()
				}
			})
		})
	}
}

// A server stopped (Stop) in the middle of a call cuts it after the request
// was sent: the call is repeated only for an idempotent method, and a
// committed stream's error is returned as it is.
func TestServerStopInTheMiddleOfCalls(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		arrived := make(chan struct{}, 1)
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n > 1 {
				return answer(ss)
			}
			method, _ := grpc.MethodFromServerStream(ss)
			if method == methodWatch {
				// The client says when "a" has arrived.
				if err := send(ss, nil, "a"); err != nil {
					return err
				}
			} else {
				arrived <- struct{}{}
			}
			return hang(ss)
		})
		lis, dial, again := nw.listen(t)
		p := retry.Policy{MaxAttempts: -1, Backoff: retry.Constant(20 * time.Millisecond)}
		conn := dialWith(t, dial, p, retrygrpc.Idempotent(methodGet))
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), realTimeSlack)
		defer cancel()

		// stopDuring starts f, stops the server once the call has reached it,
		// starts a new one, and returns what f returned.
		stopDuring := func(f func() error) error {
			s.mu.Lock()
			s.calls = nil
			s.mu.Unlock()
			srv := s.serveOn(lis)
			ready(t, conn)
			done := make(chan error, 1)
			go func() { done <- f() }()
			select {
			case <-arrived:
			case err := <-done:
				t.Fatalf("the call ended before the server was stopped: %v", err)
			case <-ctx.Done():
				t.Fatal("the call never reached the server")
			}
			srv.Stop()
			srv = s.serveOn(again())
			err := <-done
			srv.Stop()
			leaveReady(t, conn) // so that the next call does not start on a closed connection
			lis = again()
			return err
		}

		err := stopDuring(func() error { _, err := invoke(ctx, conn, methodCreate); return err })
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrNotIdempotent)
		assertOutcomeUnknown(t, retryError(t, err), true)
		assert.Equal(t, 1, s.count())

		err = stopDuring(func() error {
			got, err := invoke(ctx, conn, methodGet)
			assert.Equal(t, "ok", got)
			return err
		})
		assert.NoError(t, err)
		assert.Equal(t, 2, s.count())

		var got []string
		err = stopDuring(func() error {
			cs := watch(ctx, t, conn)
			var m wrapperspb.StringValue
			if err := cs.RecvMsg(&m); err != nil {
				return err
			}
			arrived <- struct{}{}
			more, err := recvAll(cs)
			got = append([]string{m.GetValue()}, more...)
			return err
		})
		assert.Equal(t, []string{"a"}, got)
		assert.Equal(t, codes.Unavailable, status.Code(err))
		var re *retry.Error
		assert.False(t, errors.As(err, &re), "a committed stream's error is returned as it is")
		assert.Equal(t, 1, s.count())
		lis.Close()
	})
}

// GracefulStop lets the calls in flight finish; a call made while it drains
// fails before it is sent, and is retried until a new server is up.
func TestServerGracefulStopInTheMiddleOfCalls(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		arrived, release := make(chan struct{}), make(chan struct{})
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n == 1 {
				close(arrived)
				<-release
				return reply(ss, "first")
			}
			return reply(ss, "second")
		})
		lis, dial, again := nw.listen(t)
		srv := s.serveOn(lis)
		conn := dialWith(t, dial, retry.Policy{MaxAttempts: -1, Backoff: retry.Constant(20 * time.Millisecond)})
		defer conn.Close()
		ready(t, conn)
		ctx, cancel := context.WithTimeout(t.Context(), realTimeSlack)
		defer cancel()

		first := make(chan error, 1)
		go func() {
			got, err := invoke(ctx, conn, methodCreate)
			assert.Equal(t, "first", got)
			first <- err
		}()
		<-arrived
		stopped := make(chan struct{})
		go func() {
			srv.GracefulStop()
			close(stopped)
		}()
		leaveReady(t, conn) // the client has the server's GOAWAY

		second := make(chan error, 1)
		go func() {
			got, err := invoke(ctx, conn, methodCreate)
			assert.Equal(t, "second", got)
			second <- err
		}()
		time.Sleep(50 * time.Millisecond) // the second call fails and retries meanwhile
		close(release)
		assert.NoError(t, <-first)
		<-stopped
		srv = s.serveOn(again())
		defer srv.Stop()
		assert.NoError(t, <-second)
		assert.Equal(t, 2, s.count())
	})
}
