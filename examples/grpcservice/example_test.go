package grpcservice_test

import (
	"context"
	"errors"
	"fmt"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/grpcservice"
)

// The server is unavailable for two calls. Check, declared idempotent, is
// retried and succeeds at its third attempt; List, not declared, stops
// after one attempt, since the server may have acted on it.
func Example() {
	srv, err := grpcservice.Serve()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	// Waits of 0 so that the example runs at once; the default backoff
	// starts at 100ms.
	conn, err := grpcservice.Dial(srv.Addr, retry.Policy{Backoff: retry.Constant(0)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	srv.Unavailable.Store(2)
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println("Check:", resp.GetStatus(), err, "after", srv.Calls.Load(), "calls")

	srv.Calls.Store(0)
	srv.Unavailable.Store(2)
	_, err = client.List(ctx, &healthpb.HealthListRequest{})
	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println("List:", status.Code(err), "after", re.Attempts, "attempt and", srv.Calls.Load(), "call;",
			"outcome unknown:", re.OutcomeUnknown)
	}
	// Output:
	// Check: SERVING <nil> after 3 calls
	// List: Unavailable after 1 attempt and 1 call; outcome unknown: true
}
