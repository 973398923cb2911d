package retrygrpc_test

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// census is a gRPC stats handler that counts the connections and the
// streams (one per attempt) begun and ended on its side.
type census struct {
	conns, connsEnded     atomic.Int64
	streams, streamsEnded atomic.Int64
}

func (c *census) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *census) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (c *census) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.Begin:
		c.streams.Add(1)
	case *stats.End:
		c.streamsEnded.Add(1)
	}
}

func (c *census) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.conns.Add(1)
	case *stats.ConnEnd:
		c.connsEnded.Add(1)
	}
}

// countingListener counts the connections it accepts and those closed since.
type countingListener struct {
	net.Listener
	accepted, closed atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.closed.Add(1) })
	return c.Conn.Close()
}

// goroutinesDownTo waits until the process runs no more than n goroutines,
// and reports whether it came to that within realTimeSlack.
func goroutinesDownTo(n int) bool {
	for deadline := time.Now().Add(realTimeSlack); ; time.Sleep(10 * time.Millisecond) {
		if runtime.NumGoroutine() <= n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// 10,000 hedged calls over TCP loopback, one in ten with a first attempt
// that never answers, leave nothing behind: every loser is cancelled and
// its stream ended on both sides, the one connection carries every attempt,
// and no goroutine outlives the calls. It is not parallel, so that the
// process's goroutines are the test's to count.
func TestHedgingLeavesNothingBehind(t *testing.T) {
	const calls, workers = 10000, 4
	before := runtime.NumGoroutine()

	var slowFirsts, cut atomic.Int64
	s := newServer(func(_ int, ss grpc.ServerStream) error {
		var req wrapperspb.StringValue
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if req.GetValue() == "slow" && attemptOf(ss) == 1 {
			slowFirsts.Add(1)
			<-ss.Context().Done()
			cut.Add(1)
			return ss.Context().Err()
		}
		return ss.SendMsg(wrapperspb.String(req.GetValue()))
	})
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := &countingListener{Listener: tcp}
	var serverSide, clientSide census
	srv := grpc.NewServer(grpc.UnknownServiceHandler(s.serve), grpc.StatsHandler(&serverSide))
	go srv.Serve(lis)
	defer srv.Stop()

	var hedges atomic.Int64
	p := retrygrpc.HedgingPolicy(2, 2*time.Millisecond, codes.Unavailable)
	p.Observe = func(_ context.Context, e retry.Event) {
		if e.Hedge {
			hedges.Add(1)
		}
	}
	// An interceptor inside retrygrpc's sees each attempt, to check that
	// Observe does too.
	var attempts atomic.Int64
	countAttempts := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var d net.Dialer
	conn := dialRaw(t, func(ctx context.Context, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", lis.Addr().String())
	}, true, p, []retrygrpc.Option{retrygrpc.Idempotent(methodGet)},
		grpc.WithStatsHandler(&clientSide), grpc.WithChainUnaryInterceptor(countAttempts))
	defer conn.Close()
	ready(t, conn)
	got, err := invoke(t.Context(), conn, methodGet)
	require.NoError(t, err)
	require.Equal(t, "req", got)
	withConn := runtime.NumGoroutine()

	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < calls; i += workers {
				value := "fast"
				if i%10 == 0 {
					value = "slow"
				}
				ctx, cancel := context.WithTimeout(t.Context(), realTimeSlack)
				var reply wrapperspb.StringValue
				err := conn.Invoke(ctx, methodGet, wrapperspb.String(value), &reply)
				cancel()
				if err != nil || reply.GetValue() != value {
					if failed.Add(1) == 1 {
						t.Errorf("call %d: %q, %v", i, reply.GetValue(), err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "calls that failed or got another call's reply")

	assert.GreaterOrEqual(t, hedges.Load(), int64(calls/10), "every slow call was hedged")
	assert.Equal(t, int64(1+calls)+hedges.Load(), attempts.Load(),
		"Observe saw every attempt: the warm-up call, each first attempt, and each hedge")
	settled(t, false, func() bool {
		return clientSide.streamsEnded.Load() == clientSide.streams.Load() &&
			serverSide.streamsEnded.Load() == serverSide.streams.Load() && cut.Load() == slowFirsts.Load()
	}, "every stream ended, on both sides, and every slow first attempt the server saw was cut")
	// An attempt is at most one stream: a hedge cancelled as it starts (its
	// call won just then) may end before grpc-go opens a stream for it.
	assert.LessOrEqual(t, clientSide.streams.Load(), attempts.Load(), "an attempt is at most a stream")
	assert.GreaterOrEqual(t, clientSide.streams.Load(), int64(1+calls), "every call opened a stream")
	// A hedge cancelled before its headers left the client never reaches the
	// server.
	assert.LessOrEqual(t, serverSide.streams.Load(), clientSide.streams.Load(), "streams the server saw")
	t.Logf("%d calls, %d attempts, %d hedges seen by Observe, %d streams, %d slow first attempts cut",
		calls, attempts.Load(), hedges.Load(), clientSide.streams.Load(), cut.Load())
	assert.Equal(t, int64(1), lis.accepted.Load(), "one connection carried every attempt")
	assert.Equal(t, int64(1), serverSide.conns.Load())
	assert.Equal(t, int64(1), clientSide.conns.Load())
	assert.Zero(t, lis.closed.Load(), "no connection was lost to a cancelled hedge")
	assert.True(t, goroutinesDownTo(withConn), "goroutines: %d, want at most %d as before the calls",
		runtime.NumGoroutine(), withConn)

	conn.Close()
	srv.Stop()
	settled(t, false, func() bool {
		return lis.closed.Load() == lis.accepted.Load() && serverSide.connsEnded.Load() == 1 &&
			clientSide.connsEnded.Load() == 1
	}, "the connection closed on both sides")
	assert.True(t, goroutinesDownTo(before), "goroutines: %d, want at most %d as before the test",
		runtime.NumGoroutine(), before)
}
