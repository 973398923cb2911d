package retrygrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkUnaryInterceptorOverhead measures what the interceptor adds to a
// call that succeeds at once, with an invoker that does nothing, so that
// only the interceptor's own work is timed: without hedging, and with a
// Policy that hedges but whose first attempt answers long before the hedge
// delay. The end-to-end cost on a real loopback server is
// BenchmarkUnaryLoopback, and beside the other ways to retry, in the
// benchmarks module (BenchmarkGRPCUnary).
func BenchmarkUnaryInterceptorOverhead(b *testing.B) {
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	idempotent := retrygrpc.Idempotent(methodGet)
	cases := []struct {
		name        string
		interceptor grpc.UnaryClientInterceptor
	}{
		{"bare", nil},
		{"interceptor", retrygrpc.UnaryClientInterceptor(retry.Policy{}, idempotent)},
		{"hedged", retrygrpc.UnaryClientInterceptor(retrygrpc.HedgingPolicy(2, time.Hour, codes.Unavailable), idempotent)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			req, reply := wrapperspb.String("req"), new(wrapperspb.StringValue)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if c.interceptor == nil {
					err = invoker(ctx, methodGet, req, reply, nil)
				} else {
					err = c.interceptor(ctx, methodGet, req, reply, nil, invoker)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnaryLoopback measures a unary call to a real gRPC server on TCP
// loopback whose first attempt answers before the hedge delay: gRPC alone,
// through the interceptor without hedging, and through the interceptor with
// a Policy that hedges after a second (which never comes). The difference
// is what hedging costs a call that did not need it.
func BenchmarkUnaryLoopback(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		return reply(ss, "ok")
	}))
	go srv.Serve(lis)
	defer srv.Stop()

	idempotent := retrygrpc.Idempotent(methodGet)
	cases := []struct {
		name string
		opts []grpc.DialOption
	}{
		{"bare", nil},
		{"interceptor", []grpc.DialOption{grpc.WithDisableRetry(),
			grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(retry.Policy{}, idempotent))}},
		{"hedged", []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(
			retrygrpc.UnaryClientInterceptor(retrygrpc.HedgingPolicy(2, time.Second, codes.Unavailable), idempotent))}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.opts...)
			conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ctx := context.Background()
			req, reply := wrapperspb.String("req"), new(wrapperspb.StringValue)
			if err := conn.Invoke(ctx, methodGet, req, reply); err != nil { // connect first
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(ctx, methodGet, req, reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
