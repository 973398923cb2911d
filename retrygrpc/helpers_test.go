package retrygrpc_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test service has no generated code: the server takes every method with
// grpc.UnknownServiceHandler, and messages are wrapperspb.StringValue, so the
// default proto codec carries them.
const (
	methodGet    = "/test.Store/Get"    // declared idempotent where a test says so
	methodCreate = "/test.Store/Create" // never declared idempotent
	methodWatch  = "/test.Store/Watch"  // server-streaming
	methodUpload = "/test.Store/Upload" // client-streaming
	methodChat   = "/test.Store/Chat"   // bidirectional
)

var (
	watchDesc  = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
	uploadDesc = &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
	chatDesc   = &grpc.StreamDesc{StreamName: "Chat", ClientStreams: true, ServerStreams: true}
)

// handler serves the n-th call (1-based) the server received.
type handler func(n int, ss grpc.ServerStream) error

// seenCall is a call as the server received it.
type seenCall struct {
	method   string
	previous []string // the grpc-previous-rpc-attempts values
	deadline time.Duration
	hasLimit bool // the call had a deadline
}

// server is a gRPC service that records the calls it receives and serves
// each with its handler, on as many gRPC servers as a test starts (one after
// another, to restart it).
type server struct {
	handle handler

	mu    sync.Mutex
	calls []seenCall
}

func newServer(h handler) *server { return &server{handle: h} }

// serveOn starts a new gRPC server for s on lis.
func (s *server) serveOn(lis net.Listener) *running {
	srv := grpc.NewServer(grpc.UnknownServiceHandler(s.serve))
	go srv.Serve(lis)
	return &running{srv, lis}
}

// running is a gRPC server serving a listener. Its Stop and GracefulStop
// also close the listener, which grpc.Server does only if Serve has begun:
// a test that listens again at the same address needs it closed.
type running struct {
	*grpc.Server
	lis net.Listener
}

func (r *running) Stop() {
	r.Server.Stop()
	r.lis.Close()
}

func (r *running) GracefulStop() {
	r.lis.Close()
	r.Server.GracefulStop()
}

func (s *server) serve(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	c := seenCall{method: method, previous: md.Get("grpc-previous-rpc-attempts")}
	if d, ok := ss.Context().Deadline(); ok {
		c.deadline, c.hasLimit = time.Until(d), true
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	n := len(s.calls)
	s.mu.Unlock()
	return s.handle(n, ss)
}

// seen returns the calls received so far.
func (s *server) seen() []seenCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenCall(nil), s.calls...)
}

// count returns the number of calls received so far.
func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// previous returns the grpc-previous-rpc-attempts values of each call, ""
// where there was none.
func (s *server) previous() []string {
	var out []string
	for _, c := range s.seen() {
		switch len(c.previous) {
		case 0:
			out = append(out, "")
		case 1:
			out = append(out, c.previous[0])
		default:
			out = append(out, "several: "+c.previous[0]+","+c.previous[1])
		}
	}
	return out
}

// network says how a test's client reaches its server.
type network struct {
	name string
	// listen returns a listener, a dialer that reaches it, and a func that
	// listens again at the same place once the listener is closed, for a
	// test that restarts its server.
	listen func(t *testing.T) (lis net.Listener, dial func(context.Context, string) (net.Conn, error),
		again func() net.Listener)
}

// networks are the two loopback transports every end-to-end test runs on:
// bufconn (in memory, usable inside a synctest bubble) and TCP on 127.0.0.1.
var networks = []network{
	{"bufconn", listenBufconn},
	{"tcp", listenTCP},
}

func listenBufconn(*testing.T) (net.Listener, func(context.Context, string) (net.Conn, error), func() net.Listener) {
	var cur atomic.Pointer[bufconn.Listener]
	cur.Store(bufconn.Listen(1 << 20))
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return cur.Load().DialContext(ctx) }
	again := func() net.Listener {
		lis := bufconn.Listen(1 << 20)
		cur.Store(lis)
		return lis
	}
	return cur.Load(), dial, again
}

func listenTCP(t *testing.T) (net.Listener, func(context.Context, string) (net.Conn, error), func() net.Listener) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	var d net.Dialer
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	again := func() net.Listener {
		lis, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		return lis
	}
	return lis, dial, again
}

// fastReconnect makes the client reconnect 10ms after a failed connection
// instead of grpc-go's 1s, so that a test that stops its server sees the
// next one soon.
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond},
	MinConnectTimeout: time.Second,
})

// start serves s on a new listener of nw and returns a client connection to
// it that retries with p, and a func that closes both. Call it before the
// test ends: inside a synctest bubble, everything must stop before the
// bubble does.
func start(t *testing.T, nw network, s *server, p retry.Policy, opts ...retrygrpc.Option) (*grpc.ClientConn, func()) {
	t.Helper()
	lis, dial, _ := nw.listen(t)
	srv := s.serveOn(lis)
	conn := dialWith(t, dial, p, opts...)
	ready(t, conn)
	return conn, func() {
		conn.Close()
		srv.Stop()
	}
}

// dialWith returns a client connection through dial with both interceptors
// built from p and opts, grpc-go's own retries off.
func dialWith(t *testing.T, dial func(context.Context, string) (net.Conn, error), p retry.Policy,
	opts ...retrygrpc.Option) *grpc.ClientConn {
	t.Helper()
	return dialRaw(t, dial, true, p, opts)
}

// dialRaw is dialWith with grpc-go's own retries off only if disableRetry,
// and more dial options.
func dialRaw(t *testing.T, dial func(context.Context, string) (net.Conn, error), disableRetry bool,
	p retry.Policy, opts []retrygrpc.Option, more ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	dialOpts := append([]grpc.DialOption{
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		fastReconnect,
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(p, opts...)),
		grpc.WithChainStreamInterceptor(retrygrpc.StreamClientInterceptor(p, opts...)),
	}, more...)
	if disableRetry {
		dialOpts = append(dialOpts, grpc.WithDisableRetry())
	}
	conn, err := grpc.NewClient("passthrough:///loopback", dialOpts...)
	require.NoError(t, err)
	return conn
}

// ready connects conn and waits until it is ready, so that no test's first
// attempt also pays for the connection.
func ready(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	conn.Connect()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		require.True(t, conn.WaitForStateChange(t.Context(), st), "the connection never got ready")
	}
}

// invoke makes a unary call of method with request "req" and returns the
// reply's value.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, opts ...grpc.CallOption) (string, error) {
	var reply wrapperspb.StringValue
	err := conn.Invoke(ctx, method, wrapperspb.String("req"), &reply, opts...)
	return reply.GetValue(), err
}

// reply answers a unary call (or a server-streaming one) with value.
func reply(ss grpc.ServerStream, value string) error {
	var req wrapperspb.StringValue
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	return ss.SendMsg(wrapperspb.String(value))
}

// retryError returns the *retry.Error inside err, failing the test if there
// is none.
func retryError(t *testing.T, err error) *retry.Error {
	t.Helper()
	var re *retry.Error
	require.True(t, errors.As(err, &re), "want a *retry.Error in %v", err)
	return re
}

// each runs f once on each network, as a parallel subtest: on bufconn inside
// a synctest bubble, where time is virtual and every duration exact (exact
// is true), and on TCP in real time.
func each(t *testing.T, f func(t *testing.T, nw network, exact bool)) {
	t.Helper()
	for _, nw := range networks {
		t.Run(nw.name, func(t *testing.T) {
			t.Parallel()
			if nw.name == "bufconn" {
				synctest.Test(t, func(t *testing.T) { f(t, nw, true) })
				return
			}
			f(t, nw, false)
		})
	}
}

// realTimeSlack is how much longer than its waits a call on TCP may take.
// It only catches a call that hangs: on a loaded machine a process can
// stall for seconds, so on TCP the tests check lower bounds and counts, and
// leave exact durations to the bubbles.
const realTimeSlack = 30 * time.Second

// assertTook checks how long a call took: exactly want in a bubble, at least
// want and at most want+realTimeSlack in real time.
func assertTook(t *testing.T, exact bool, took, want time.Duration) {
	t.Helper()
	if exact {
		assert.Equal(t, want, took, "took %v, want exactly %v", took, want)
		return
	}
	assert.GreaterOrEqual(t, took, want, "took %v, want at least %v", took, want)
	assert.Less(t, took, want+realTimeSlack, "took %v, want about %v", took, want)
}

// fail returns a handler that fails every call with code.
func fail(c codes.Code) handler {
	return func(int, grpc.ServerStream) error { return status.Error(c, "failing") }
}

// pushBack fails a call with code and a grpc-retry-pushback-ms trailer.
func pushBack(ss grpc.ServerStream, c codes.Code, values ...string) error {
	md := metadata.MD{}
	for _, v := range values {
		md.Append("grpc-retry-pushback-ms", v)
	}
	ss.SetTrailer(md)
	return status.Error(c, "pushed back")
}

// hang blocks until the call's context ends, as a server that does not
// answer in time.
func hang(ss grpc.ServerStream) error {
	<-ss.Context().Done()
	return status.FromContextError(ss.Context().Err()).Err()
}
