package retrygrpc_test

import (
	"strings"
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A service config that gives every method of test.Store a retryPolicy, as a
// name resolver may hand one to a client that never asked for it.
const retryingServiceConfig = `{"methodConfig": [{"name": [{"service": "test.Store"}], "retryPolicy": {
	"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
	"retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// When a service config turns grpc-go's own retries on for a method and the
// connection was dialled without grpc.WithDisableRetry, the two loops would
// multiply: the interceptors leave the retrying to grpc-go (one attempt of
// theirs, stopped with ErrAlreadyRetried) and say so once, through grpclog.
// With WithDisableRetry, the same service config changes nothing.
func TestGRPCRetriesOnAreDetected(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		for _, disabled := range []bool{true, false} {
			// A method of its own, so that the log lines are this case's.
			method := "/test.Store/Get" + strings.ToUpper(nw.name[:1]) + nw.name[1:]
			if disabled {
				method += "Disabled"
			}
			warnedBefore := len(logged(method)) // from an earlier run of the test, with -count
			// The server reads the request before it fails: with grpc-go's
			// retries on, a failure that races the request's sending ends
			// grpc-go's loop in SendMsg with a bare "max retries exhausted"
			// error, code UNKNOWN.
			s := newServer(func(_ int, ss grpc.ServerStream) error {
				var req wrapperspb.StringValue
				if err := ss.RecvMsg(&req); err != nil {
					return err
				}
				return status.Error(codes.Unavailable, "failing")
			})
			lis, dial, _ := nw.listen(t)
			srv := s.serveOn(lis)
			conn := dialRaw(t, dial, disabled, retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)},
				[]retrygrpc.Option{retrygrpc.Idempotent(method)}, grpc.WithDefaultServiceConfig(retryingServiceConfig))

			for range 2 {
				before := s.count()
				_, err := invoke(t.Context(), conn, method)
				assert.Equal(t, codes.Unavailable, status.Code(err))
				if disabled {
					assert.ErrorIs(t, err, retry.ErrExhausted)
					assert.Equal(t, []string{"", "1"}, s.previous()[before:], "the interceptor's attempts only")
				} else {
					assert.ErrorIs(t, err, retry.ErrAlreadyRetried)
					assert.Equal(t, 1, retryError(t, err).Attempts)
					assert.Equal(t, []string{"", "1", "2"}, s.previous()[before:], "grpc-go's attempts only")
				}
			}
			// A server-streaming call, the same way.
			before := s.count()
			cs, err := conn.NewStream(t.Context(), watchDesc, method+"Watch")
			assert.NoError(t, err)
			assert.NoError(t, cs.SendMsg(wrapperspb.String("req")))
			assert.NoError(t, cs.CloseSend())
			_, err = recvAll(cs)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			if disabled {
				assert.ErrorIs(t, err, retry.ErrNotIdempotent, "the interceptor's: not declared idempotent")
				assert.Equal(t, 1, s.count()-before)
			} else {
				assert.ErrorIs(t, err, retry.ErrAlreadyRetried)
				assert.Equal(t, 3, s.count()-before, "grpc-go's attempts only")
			}

			warned := logged(method)[warnedBefore:]
			if disabled {
				assert.Empty(t, warned)
			} else if assert.Len(t, warned, 2, "warned once for each method") {
				assert.Contains(t, warned[0], "[retrygrpc]")
				assert.Contains(t, warned[0], "grpc.WithDisableRetry")
			}
			conn.Close()
			srv.Stop()
		}
	})
}
