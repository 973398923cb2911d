// Package grpcservice retries the calls of a gRPC client with retrygrpc,
// against a real server on loopback: here grpc-go's own health service,
// whose generated code names each method in a constant.
//
// A call that the server may have carried out (UNAVAILABLE from the server
// itself, a deadline, a connection cut mid-call) is repeated only if its
// method is declared idempotent: listed with retrygrpc.Idempotent, marked
// idempotency_level = IDEMPOTENT or NO_SIDE_EFFECTS in its .proto, or sent
// with an idempotency-key in its metadata. Any other such call stops after
// its one attempt, its outcome unknown, since the server may have done the
// work. grpc-go's own
// retries are turned off, so that only the interceptor retries.
package grpcservice

import (
	"context"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
)

// Dial returns a client connection to target whose unary calls are retried
// under policy, with Check declared idempotent: asking for a status twice
// changes nothing.
func Dial(target string, policy retry.Policy) (*grpc.ClientConn, error) {
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy,
			retrygrpc.Idempotent(healthpb.Health_Check_FullMethodName))))
}

// Server is a health server on a loopback port that answers UNAVAILABLE to
// as many calls as Unavailable holds, then serves.
type Server struct {
	Addr        string
	Unavailable atomic.Int32 // calls still to refuse
	Calls       atomic.Int32 // calls received
	srv         *grpc.Server
}

// Serve starts a Server; Stop stops it.
func Serve() (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: lis.Addr().String()}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.Calls.Add(1)
		if s.Unavailable.Add(-1) >= 0 {
			return nil, status.Error(codes.Unavailable, "warming up")
		}
		s.Unavailable.Store(0)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s.srv, health.NewServer())
	go s.srv.Serve(lis)
	return s, nil
}

// Stop stops the server at once.
func (s *Server) Stop() { s.srv.Stop() }
