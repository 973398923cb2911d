package retrygrpc_test

import (
	"context"
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"google.golang.org/grpc"
)

// BenchmarkUnaryInterceptorOverhead measures what the interceptor adds to a
// call that succeeds at once, with an invoker that does nothing, so that
// only the interceptor's own work is timed. The end-to-end cost on a real
// loopback server, beside the other ways to retry, is in the benchmarks
// module (BenchmarkGRPCUnary).
func BenchmarkUnaryInterceptorOverhead(b *testing.B) {
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	cases := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"bare", func(ctx context.Context) error { return invoker(ctx, methodGet, nil, nil, nil) }},
		{"interceptor", func() func(context.Context) error {
			i := retrygrpc.UnaryClientInterceptor(retry.Policy{}, retrygrpc.Idempotent(methodGet))
			return func(ctx context.Context) error { return i(ctx, methodGet, nil, nil, nil, invoker) }
		}()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
