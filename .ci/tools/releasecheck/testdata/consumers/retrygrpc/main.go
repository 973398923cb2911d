// Command retrygrpc uses retrygrpc as a user installs it: a real gRPC health
// server on loopback that is unavailable twice, and a client whose
// interceptor retries Check, declared idempotent.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
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

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	var calls atomic.Int32
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if calls.Add(1) <= 2 {
			return nil, status.Error(codes.Unavailable, "warming up")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(retry.Policy{Backoff: retry.Constant(0)},
			retrygrpc.Idempotent(healthpb.Health_Check_FullMethodName))))
	if err != nil {
		fail("dial: %v", err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || calls.Load() != 3 {
		fail("Check: %v, %v after %d calls; want SERVING after 3", resp.GetStatus(), err, calls.Load())
	}
	fmt.Println("Check: SERVING after 2 answers of UNAVAILABLE")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
