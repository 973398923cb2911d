package benchmarks

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	grpcretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gRPC scenarios run one unary method on one loopback server, through
// four clients that differ only in how they retry:
//
//   - direct: no retry interceptor and grpc-go's retries off: the floor;
//   - retry: retrygrpc.UnaryClientInterceptor, the method declared idempotent;
//   - grpc-middleware: go-grpc-middleware v2's retry interceptor, WithMax(5),
//     exponential backoff, retrying UNAVAILABLE;
//   - grpc-builtin: grpc-go's own retries, from a service config retryPolicy
//     (maxAttempts 5, retrying UNAVAILABLE; grpc-go always adds ±20% jitter).
//
// All but grpc-builtin dial with grpc.WithDisableRetry, as retrygrpc asks.
const (
	methodOK   = "/bench.Store/Get"      // answers at once
	methodDown = "/bench.Store/Degraded" // always UNAVAILABLE
)

// grpcServer serves the two methods on a loopback TCP listener and counts
// the calls of methodDown.
type grpcServer struct {
	addr  string
	srv   *grpc.Server
	downs atomic.Int64
}

func startGRPC(tb testing.TB, lis net.Listener) *grpcServer {
	tb.Helper()
	s := &grpcServer{addr: lis.Addr().String()}
	s.srv = grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var req wrapperspb.StringValue
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if m, _ := grpc.MethodFromServerStream(ss); m == methodDown {
			s.downs.Add(1)
			return status.Error(codes.Unavailable, "degraded")
		}
		return ss.SendMsg(&req)
	}))
	go s.srv.Serve(lis)
	tb.Cleanup(s.srv.Stop)
	return s
}

// grpcClient is one way of retrying: the dial options it adds.
type grpcClient struct {
	name string
	opts func(s schedule) []grpc.DialOption
}

var grpcClients = []grpcClient{
	{"direct", func(schedule) []grpc.DialOption { return []grpc.DialOption{grpc.WithDisableRetry()} }},
	{"retry", func(s schedule) []grpc.DialOption {
		p := retryPolicy(s)
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(
			retrygrpc.UnaryClientInterceptor(p, retrygrpc.Idempotent(methodOK, methodDown)))}
	}},
	{"grpc-middleware", func(s schedule) []grpc.DialOption {
		backoff := grpcretry.BackoffExponential(s.base)
		if s.jitter {
			backoff = grpcretry.BackoffExponentialWithJitterBounded(s.base, 1, maxWait)
		}
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(grpcretry.UnaryClientInterceptor(
			grpcretry.WithMax(attempts), grpcretry.WithBackoff(backoff), grpcretry.WithCodes(codes.Unavailable)))}
	}},
	{"grpc-builtin", func(s schedule) []grpc.DialOption {
		return []grpc.DialOption{grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "bench.Store"}],
			"retryPolicy": {"maxAttempts": 5, "initialBackoff": "` + seconds(s.base) + `", "maxBackoff": "10s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)}
	}},
}

// seconds writes d as a service config duration, such as "0.04s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// connect returns a connection of c to addr, ready to use.
func (c grpcClient) connect(tb testing.TB, dial func(context.Context, string) (net.Conn, error), s schedule) *grpc.ClientConn {
	tb.Helper()
	opts := append([]grpc.DialOption{grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials())}, c.opts(s)...)
	conn, err := grpc.NewClient("passthrough:///bench", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	var reply wrapperspb.StringValue
	if err := conn.Invoke(context.Background(), methodOK, wrapperspb.String("warm up"), &reply); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// tcpLoopback listens on 127.0.0.1 and returns the listener and a dialer.
func tcpLoopback(tb testing.TB) (net.Listener, func(context.Context, string) (net.Conn, error)) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var d net.Dialer
	addr := lis.Addr().String()
	return lis, func(ctx context.Context, _ string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// BenchmarkGRPCUnary: one successful unary call to a loopback TCP server,
// as almost every call is. What the floor costs is gRPC's own work; the
// rest is the retrying.
func BenchmarkGRPCUnary(b *testing.B) {
	lis, dial := tcpLoopback(b)
	startGRPC(b, lis)
	req := wrapperspb.String("req")
	for _, c := range grpcClients {
		b.Run("lib="+c.name, func(b *testing.B) {
			conn := c.connect(b, dial, oneNanosecond)
			var reply wrapperspb.StringValue
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(b.Context(), methodOK, req, &reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGRPCDeadline: the server always answers UNAVAILABLE, the waits
// are 40ms then 80ms, and the caller's deadline is 50ms away, as in
// BenchmarkDeadline. A client that looks at the deadline gives up after the
// second attempt, at 40ms, with the server's status; one that does not
// sleeps into the deadline and returns DEADLINE_EXCEEDED at 50ms.
// attempts/op (calls the server saw), kept-error (1 when the error's status
// is still the server's UNAVAILABLE) and ms-to-return say which.
func BenchmarkGRPCDeadline(b *testing.B) {
	lis, dial := tcpLoopback(b)
	srv := startGRPC(b, lis)
	req := wrapperspb.String("req")
	for _, c := range grpcClients[1:] {
		b.Run("lib="+c.name, func(b *testing.B) {
			conn := c.connect(b, dial, fortyMillis)
			var took time.Duration
			kept := 0
			before := srv.downs.Load()
			var reply wrapperspb.StringValue
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(b.Context(), 50*time.Millisecond)
				start := time.Now()
				err := conn.Invoke(ctx, methodDown, req, &reply)
				took += time.Since(start)
				cancel()
				if status.Code(err) == codes.Unavailable {
					kept++
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(srv.downs.Load()-before)/n, "attempts/op")
			b.ReportMetric(float64(kept)/n, "kept-error")
			b.ReportMetric(float64(took)/n/1e6, "ms-to-return")
		})
	}
}

// TestGRPCDeadline replays BenchmarkGRPCDeadline in virtual time, on an
// in-memory connection (bufconn) inside a synctest bubble, where durations
// are exact, and pins what each client does: retrygrpc gives up at 40ms,
// when the second wait cannot fit, with the server's UNAVAILABLE; the
// others sleep into the deadline and return DEADLINE_EXCEEDED at 50ms.
func TestGRPCDeadline(t *testing.T) {
	tests := []struct {
		name    string
		elapsed time.Duration
		kept    bool
	}{
		{"retry", 40 * time.Millisecond, true},
		{"grpc-middleware", 50 * time.Millisecond, false},
		{"grpc-builtin", 50 * time.Millisecond, false},
	}
	var rows []string
	for i, tt := range tests {
		c := grpcClients[i+1]
		require.Equal(t, tt.name, c.name)
		t.Run(tt.name, func(t *testing.T) {
			var got outcome
			synctest.Test(t, func(t *testing.T) {
				lis := bufconn.Listen(1 << 20)
				srv := startGRPC(t, lis)
				dial := func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
				conn := c.connect(t, dial, fortyMillis)
				defer srv.srv.Stop()
				defer conn.Close()

				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				defer cancel()
				start := time.Now()
				var reply wrapperspb.StringValue
				err := conn.Invoke(ctx, methodDown, wrapperspb.String("req"), &reply)
				got = outcome{attempts: int(srv.downs.Load()), elapsed: time.Since(start),
					kept: status.Code(err) == codes.Unavailable, err: err}
			})
			rows = append(rows, row(tt.name, got))
			assert.Equalf(t, 2, got.attempts, "attempts = %d, want 2", got.attempts)
			assert.Equalf(t, tt.elapsed, got.elapsed, "returned after %v, want %v", got.elapsed, tt.elapsed)
			assert.Equalf(t, tt.kept, got.kept, "status UNAVAILABLE kept = %v, want %v (err: %v)", got.kept, tt.kept, got.err)
		})
	}
	t.Log("gRPC, 50ms deadline, waits of 40ms then 80ms:\n" + table(rows))
}
