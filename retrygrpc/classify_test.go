package retrygrpc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// One Policy, with a classifier of the user's own, serves retry.Do around an
// HTTP call and the gRPC interceptors alike: where the user's classifier has
// no opinion, each world's table applies, because a gRPC attempt's error
// answers for itself with the gRPC code table.
func TestSharedPolicyKeepsEachWorldsTable(t *testing.T) {
	t.Parallel()
	errMine := errors.New("mine: stop")
	mine := func(err error) retry.Decision {
		if errors.Is(err, errMine) {
			return retry.Stop
		}
		return retry.Undecided
	}
	policy := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0),
		Classifier: retry.Classifiers(mine, retry.DefaultClassifier)}

	var httpStatus, httpCalls atomic.Int32
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpCalls.Add(1)
		w.WriteHeader(int(httpStatus.Load()))
	}))
	defer web.Close()
	get := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, web.URL, nil)
		if err != nil {
			return err
		}
		resp, err := web.Client().Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return retry.CheckResponse(resp)
	}
	for _, tc := range []struct {
		status int
		calls  int32
		reason error
	}{
		{http.StatusServiceUnavailable, 3, retry.ErrExhausted},
		{http.StatusBadRequest, 1, retry.ErrNotRetryable},
	} {
		httpStatus.Store(int32(tc.status))
		httpCalls.Store(0)
		err := retry.Do(t.Context(), get, policy)
		assert.ErrorIs(t, err, tc.reason, "HTTP %d", tc.status)
		assert.Equal(t, tc.calls, httpCalls.Load(), "HTTP %d: calls", tc.status)
	}

	s := newServer(fail(codes.InvalidArgument))
	conn, stop := start(t, networks[1], s, policy, retrygrpc.Idempotent(methodGet))
	defer stop()
	_, err := invoke(t.Context(), conn, methodGet)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.Equal(t, 1, s.count(), "INVALID_ARGUMENT stops at once")

	s.handle = fail(codes.Unavailable)
	_, err = invoke(t.Context(), conn, methodGet)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.ErrorIs(t, err, retry.ErrExhausted)
	assert.Equal(t, 1+3, s.count(), "UNAVAILABLE on an idempotent method retries")

	// The user's own rule still comes first.
	err = retry.Do(t.Context(), func(context.Context) error { return errMine }, policy)
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	require.Equal(t, 1, retryError(t, err).Attempts)
}

// A status that grpc-go makes on the client after the request left says
// nothing about what the server did: here the server carried the call out
// and replied over the client's 4 MiB receive limit. Even a classifier that
// retries RESOURCE_EXHAUSTED must not repeat a method not declared
// idempotent, and the call's outcome is unknown.
func TestClientMadeStatusIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			return reply(ss, strings.Repeat("x", 5<<20))
		})
		retryExhausted := func(err error) retry.Decision {
			if status.Code(err) == codes.ResourceExhausted {
				return retry.Retry
			}
			return retry.Undecided
		}
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0),
			Classifier: retry.Classifiers(retryExhausted, retrygrpc.DefaultClassifier)}, retrygrpc.Idempotent(methodGet))
		defer stop()

		_, err := invoke(t.Context(), conn, methodCreate)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Contains(t, status.Convert(err).Message(), "received message larger than max")
		assert.ErrorIs(t, err, retry.ErrNotIdempotent)
		re := retryError(t, err)
		assert.Equal(t, 1, re.Attempts)
		assertOutcomeUnknown(t, re, true)
		assert.Equal(t, 1, s.count(), "the server ran it once")

		// Declared idempotent, it is the classifier's to decide.
		_, err = invoke(t.Context(), conn, methodGet)
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 1+3, s.count())
	})
}
