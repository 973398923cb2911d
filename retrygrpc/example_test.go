package retrygrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// greeter starts an in-memory greeter service whose n-th call fails with
// fail(n), or succeeds if that is nil, and returns a dial option that reaches
// it, the number of calls it received, and a func that stops it.
func greeter(fail func(n int32) error) (grpc.DialOption, *atomic.Int32, func()) {
	lis := bufconn.Listen(1 << 20)
	calls := new(atomic.Int32)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var name wrapperspb.StringValue
		if err := ss.RecvMsg(&name); err != nil {
			return err
		}
		if err := fail(calls.Add(1)); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String("hello, " + name.GetValue()))
	}))
	go srv.Serve(lis)
	dialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	return dialer, calls, srv.Stop
}

// The server is unavailable twice, then answers. Hello is declared
// idempotent (generated code has the name as a constant), so the call is
// retried even though the server may have seen it.
func Example() {
	dialer, calls, stop := greeter(func(n int32) error {
		if n <= 2 {
			return status.Error(codes.Unavailable, "warming up")
		}
		return nil
	})
	defer stop()

	// The example waits 0 between attempts so that it runs at once; the
	// default backoff starts at 100ms.
	policy := retry.Policy{Backoff: retry.Constant(0)}
	conn, err := grpc.NewClient("passthrough:///greeter", dialer, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), // the interceptor retries; grpc-go must not as well
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy, retrygrpc.Idempotent("/greet.Greeter/Hello"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	var reply wrapperspb.StringValue
	err = conn.Invoke(context.Background(), "/greet.Greeter/Hello", wrapperspb.String("gopher"), &reply)
	fmt.Println(reply.GetValue(), err)
	fmt.Println("calls:", calls.Load())
	// Output:
	// hello, gopher <nil>
	// calls: 3
}

// A method that is not declared idempotent is not repeated once the server
// may have acted on it: UNAVAILABLE from the server stops at once, and the
// error says the outcome is unknown. Its status is the server's.
func ExampleIdempotent() {
	dialer, calls, stop := greeter(func(int32) error { return status.Error(codes.Unavailable, "shutting down") })
	defer stop()

	conn, err := grpc.NewClient("passthrough:///greeter", dialer, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(retry.Policy{Backoff: retry.Constant(0)},
			retrygrpc.Idempotent("/greet.Greeter/Hello"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	var reply wrapperspb.StringValue
	err = conn.Invoke(context.Background(), "/greet.Greeter/Charge", wrapperspb.String("gopher"), &reply)
	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println(status.Code(err), re.Attempts, re.OutcomeUnknown)
	}
	err = conn.Invoke(context.Background(), "/greet.Greeter/Hello", wrapperspb.String("gopher"), &reply)
	if errors.As(err, &re) {
		fmt.Println(status.Code(err), re.Attempts, re.OutcomeUnknown)
	}
	fmt.Println("calls:", calls.Load())
	// Output:
	// Unavailable 1 true
	// Unavailable 4 true
	// calls: 5
}

// DefaultClassifier is the code table; a Policy builds on it to retry more
// codes, here INTERNAL, for a service that documents it as transient.
func ExampleDefaultClassifier() {
	dialer, calls, stop := greeter(func(n int32) error {
		if n == 1 {
			return status.Error(codes.Internal, "transient, says the service")
		}
		return nil
	})
	defer stop()

	policy := retry.Policy{
		Backoff: retry.Constant(0),
		Classifier: retry.Classifiers(func(err error) retry.Decision {
			if status.Code(err) == codes.Internal {
				return retry.Retry
			}
			return retry.Undecided
		}, retrygrpc.DefaultClassifier),
	}
	conn, err := grpc.NewClient("passthrough:///greeter", dialer, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy, retrygrpc.Idempotent("/greet.Greeter/Hello"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	var reply wrapperspb.StringValue
	err = conn.Invoke(context.Background(), "/greet.Greeter/Hello", wrapperspb.String("gopher"), &reply)
	fmt.Println(reply.GetValue(), err, calls.Load())
	// Output:
	// hello, gopher <nil> 2
}

// CallPolicy gives one call its own policy: here, a single attempt.
func ExampleCallPolicy() {
	dialer, calls, stop := greeter(func(int32) error { return status.Error(codes.Unavailable, "busy") })
	defer stop()

	conn, err := grpc.NewClient("passthrough:///greeter", dialer, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(retry.Policy{Backoff: retry.Constant(0)},
			retrygrpc.Idempotent("/greet.Greeter/Hello"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	var reply wrapperspb.StringValue
	err = conn.Invoke(context.Background(), "/greet.Greeter/Hello", wrapperspb.String("gopher"), &reply,
		retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 1}))
	fmt.Println(err)
	fmt.Println("calls:", calls.Load())
	// Output:
	// retry: gave up after 1 attempt (attempts exhausted): rpc error: code = Unavailable desc = busy
	// calls: 1
}

// HedgingPolicy gives a call gRFC A6's hedgingPolicy. Here the server is
// stuck on whichever attempt reaches it first, and answers the next: the
// hedge's reply is the call's, and the stuck attempt is cancelled. Hedging
// needs the method declared idempotent. A real hedge delay is about the
// method's 95th percentile latency; the example's is 0, which sends both
// attempts at once, so that it runs at once.
func ExampleHedgingPolicy() {
	lis := bufconn.Listen(1 << 20)
	var calls atomic.Int32
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var name wrapperspb.StringValue
		if err := ss.RecvMsg(&name); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			<-ss.Context().Done() // stuck until the client cancels the attempt
			return ss.Context().Err()
		}
		return ss.SendMsg(wrapperspb.String("hello, " + name.GetValue()))
	}))
	go srv.Serve(lis)
	defer srv.Stop()

	policy := retrygrpc.HedgingPolicy(2, 0, codes.Unavailable)
	conn, err := grpc.NewClient("passthrough:///greeter",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy, retrygrpc.Idempotent("/greet.Greeter/Hello"))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	var reply wrapperspb.StringValue
	err = conn.Invoke(context.Background(), "/greet.Greeter/Hello", wrapperspb.String("gopher"), &reply)
	fmt.Println(reply.GetValue(), err)
	fmt.Println("calls:", calls.Load())
	// Output:
	// hello, gopher <nil>
	// calls: 2
}
