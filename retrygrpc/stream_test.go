package retrygrpc_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// watch opens a server-streaming call, sends its one request and closes the
// sending side, as generated code does.
func watch(ctx context.Context, t *testing.T, conn *grpc.ClientConn, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	cs, err := conn.NewStream(ctx, watchDesc, methodWatch, opts...)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String("req")))
	require.NoError(t, cs.CloseSend())
	return cs
}

// recvAll receives until the stream ends and returns the values received
// and the error that ended it (nil for io.EOF).
func recvAll(cs grpc.ClientStream) ([]string, error) {
	var got []string
	for {
		var m wrapperspb.StringValue
		if err := cs.RecvMsg(&m); err != nil {
			if err == io.EOF {
				err = nil
			}
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

// send answers a server-streaming call: it reads the request, then sends
// each value, and ends with end.
func send(ss grpc.ServerStream, end error, values ...string) error {
	var req wrapperspb.StringValue
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	for _, v := range values {
		if err := ss.SendMsg(wrapperspb.String(v)); err != nil {
			return err
		}
	}
	return end
}

func TestServerStreamRetriedBeforeItsFirstMessage(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n <= 2 {
				return status.Error(codes.Unavailable, "not yet")
			}
			return send(ss, nil, "a", "b", "c")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(10 * time.Millisecond)},
			retrygrpc.Idempotent(methodWatch))
		defer stop()

		begin := time.Now()
		got, err := recvAll(watch(t.Context(), t, conn))
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b", "c"}, got)
		assert.Equal(t, []string{"", "1", "2"}, s.previous())
		assertTook(t, exact, time.Since(begin), 20*time.Millisecond)
	})
}

func TestServerStreamNotRetriedOnceCommitted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		handle handler
		want   []string
	}{
		{"after its first message", func(_ int, ss grpc.ServerStream) error {
			return send(ss, status.Error(codes.Unavailable, "gone"), "a")
		}, []string{"a"}},
		{"after its header", func(_ int, ss grpc.ServerStream) error {
			if err := ss.SendHeader(metadata.Pairs("k", "v")); err != nil {
				return err
			}
			return send(ss, status.Error(codes.Unavailable, "gone"))
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(tc.handle)
				conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(0)}, retrygrpc.Idempotent(methodWatch))
				defer stop()

				got, err := recvAll(watch(t.Context(), t, conn))
				assert.Equal(t, tc.want, got)
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.Equal(t, "rpc error: code = Unavailable desc = gone", err.Error(), "returned as it is")
				var re *retry.Error
				assert.False(t, errors.As(err, &re))
				assert.Equal(t, 1, s.count())
			})
		})
	}
}

// A stream that may have reached the server is repeated only for a method
// declared idempotent; one that could not be opened, for any method (see
// the restart tests).
func TestServerStreamRepeatsAnUnknownOutcomeOnlyWhenIdempotent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
		defer stop()

		_, err := recvAll(watch(t.Context(), t, conn))
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrNotIdempotent)
		assertOutcomeUnknown(t, retryError(t, err), true)
		assert.Equal(t, 1, s.count())

		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k")
		_, err = recvAll(watch(ctx, t, conn))
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 4, s.count())
	})
}

func TestServerStreamHonoursPushback(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			switch n {
			case 1:
				return pushBack(ss, codes.Unavailable, "150")
			case 2:
				return send(ss, nil, "a")
			}
			return pushBack(ss, codes.Unavailable, "-1")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(time.Millisecond)})
		defer stop()

		begin := time.Now()
		got, err := recvAll(watch(t.Context(), t, conn))
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, got)
		assertTook(t, exact, time.Since(begin), 150*time.Millisecond)

		begin = time.Now()
		_, err = recvAll(watch(t.Context(), t, conn))
		assert.ErrorIs(t, err, retry.ErrNotRetryable, "a negative pushback stops at once")
		assert.Equal(t, 3, s.count())
		assertTook(t, exact, time.Since(begin), 0)
	})
}

// Header before RecvMsg runs the same loop, until a header arrives; when
// retrying stops, Header says nothing and RecvMsg says why, as in gRPC.
func TestServerStreamHeaderFirst(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			switch n {
			case 1:
				return status.Error(codes.Unavailable, "not yet")
			case 2:
				if err := ss.SetHeader(metadata.Pairs("server", "second")); err != nil {
					return err
				}
				return send(ss, nil, "a")
			case 3:
				return send(ss, nil) // no message, no header: a trailers-only OK
			}
			return status.Error(codes.NotFound, "no such thing")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(0)}, retrygrpc.Idempotent(methodWatch))
		defer stop()

		cs := watch(t.Context(), t, conn)
		md, err := cs.Header()
		require.NoError(t, err)
		assert.Equal(t, []string{"second"}, md.Get("server"))
		got, err := recvAll(cs)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, got)

		cs = watch(t.Context(), t, conn)
		md, err = cs.Header()
		assert.NoError(t, err)
		assert.Nil(t, md)
		got, err = recvAll(cs)
		assert.NoError(t, err)
		assert.Empty(t, got)

		cs = watch(t.Context(), t, conn)
		md, err = cs.Header()
		assert.NoError(t, err)
		assert.Nil(t, md)
		_, err = recvAll(cs)
		assert.Equal(t, codes.NotFound, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrNotRetryable)
		assert.Equal(t, 4, s.count())
	})
}

// AttemptTimeout bounds a stream's attempt until it commits, and no longer:
// the committed stream lives as long as the caller's context.
func TestServerStreamAttemptTimeoutEndsAtCommit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		unit := 10 * time.Millisecond
		if !exact {
			unit = 250 * time.Millisecond
		}
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n == 1 {
				return hang(ss)
			}
			if err := send(ss, nil, "a"); err != nil {
				return err
			}
			time.Sleep(3 * unit)
			return ss.SendMsg(wrapperspb.String("b"))
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(unit), AttemptTimeout: unit},
			retrygrpc.Idempotent(methodWatch))
		defer stop()

		begin := time.Now()
		cs, err := conn.NewStream(t.Context(), watchDesc, methodWatch)
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(wrapperspb.String("req")))
		require.NoError(t, cs.CloseSend())
		got, err := recvAll(cs)
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b"}, got)
		assertTook(t, exact, time.Since(begin), 5*unit)
		if exact {
			// On TCP a loaded machine may make the second attempt late too.
			assert.Equal(t, 2, s.count())
		}

		// A stream whose every attempt times out reports DEADLINE_EXCEEDED.
		s.handle = func(_ int, ss grpc.ServerStream) error { return hang(ss) }
		before := s.count()
		_, err = recvAll(watch(t.Context(), t, conn, retrygrpc.CallPolicy(retry.Policy{
			MaxAttempts: 2, Backoff: retry.Constant(0), AttemptTimeout: unit})))
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 2, retryError(t, err).Attempts)
		if exact {
			assert.Equal(t, before+2, s.count())
		} else {
			assert.LessOrEqual(t, s.count(), before+2) // a loaded machine may cut one before it arrives
		}
	})
}

// Before commit a stream's Context is the caller's context, and calling it
// does not stop the retrying: the stream is opened by the loop, at the first
// RecvMsg or Header, so there is no attempt's context yet to give.
func TestServerStreamContextBeforeCommit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n < 3 {
				return status.Error(codes.Unavailable, "not yet")
			}
			return send(ss, nil, "a")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(0)}, retrygrpc.Idempotent(methodWatch))
		defer stop()

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cs := watch(ctx, t, conn)
		assert.Same(t, ctx, cs.Context())
		got, err := recvAll(cs)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, got)
		assert.Equal(t, 3, s.count())
		// Once committed, it is the stream's own, which carries the peer.
		_, ok := peer.FromContext(cs.Context())
		assert.True(t, ok)
	})
}

// A server-streaming call's first attempt starts where the loop starts, at
// the first RecvMsg: the limiter paces it, and a stop before it (no time
// left for the limiter's next token) reports 0 attempts, truthfully, with
// nothing sent and nothing left open.
func TestServerStreamFirstAttemptIsPaced(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		var arrived atomic.Int64 // when the server saw the call, in ns since begin
		begin := time.Now()
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			arrived.Store(int64(time.Since(begin)))
			return send(ss, nil, "a")
		})
		lim := rate.NewLimiter(rate.Every(200*time.Millisecond), 1)
		conn, stop := start(t, nw, s, retry.Policy{Limiter: retry.RateLimiter(lim)}, retrygrpc.Idempotent(methodWatch))
		defer stop()

		begin = time.Now()
		require.True(t, lim.Allow())
		cs := watch(t.Context(), t, conn)
		got, err := recvAll(cs)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, got)
		assert.GreaterOrEqual(t, time.Duration(arrived.Load()), 199*time.Millisecond, "the stream opened after the limiter's wait")
		if exact {
			assert.Equal(t, 200*time.Millisecond, time.Duration(arrived.Load()))
		}

		// A limiter whose next token comes long after the deadline.
		late := rate.NewLimiter(rate.Every(time.Hour), 1)
		require.True(t, late.Allow())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		cs = watch(ctx, t, conn, retrygrpc.CallPolicy(retry.Policy{Limiter: retry.RateLimiter(late)}))
		_, err = recvAll(cs)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrNoTimeLeft)
		re := retryError(t, err)
		assert.Equal(t, 0, re.Attempts)
		assert.False(t, re.OutcomeUnknown)
		if exact {
			synctest.Wait() // a stream opened would have reached the server by now
		}
		assert.Equal(t, 1, s.count(), "the stopped call sent nothing")
		assert.Same(t, ctx, cs.Context())
	})
}

// A client-streaming call is retried only while its stream opens (see the
// restart tests): once open, its messages are never replayed, and its
// failure is returned as it is.
func TestClientStreamNotRetriedOnceOpen(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			var m wrapperspb.StringValue
			if err := ss.RecvMsg(&m); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "gone")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: time.Minute},
			retrygrpc.Idempotent(methodUpload))
		defer stop()

		cs, err := conn.NewStream(t.Context(), uploadDesc, methodUpload)
		require.NoError(t, err)
		for _, v := range []string{"a", "b", "c"} {
			if err := cs.SendMsg(wrapperspb.String(v)); err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
		}
		require.NoError(t, cs.CloseSend())
		var m wrapperspb.StringValue
		err = cs.RecvMsg(&m)
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Equal(t, "rpc error: code = Unavailable desc = gone", err.Error())
		assert.Equal(t, 1, s.count())
	})
}
