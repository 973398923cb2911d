package retrygrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// finishes records the errors a grpc.OnFinish option is called with.
type finishes struct {
	mu   sync.Mutex
	errs []error
}

func (f *finishes) option() grpc.CallOption {
	return grpc.OnFinish(func(err error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.errs = append(f.errs, err)
	})
}

// wait returns the errors recorded once there are n, failing the test if
// more come or if they do not come in time (gRPC may call OnFinish on its
// own goroutine, just after the call returns).
func (f *finishes) wait(t *testing.T, exact bool, n int) []error {
	t.Helper()
	settled(t, exact, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.errs) >= n
	}, "OnFinish was not called")
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// grpc.OnFinish runs once per call, with the call's final status, as gRPC
// documents it: not once per attempt.
func TestOnFinishRunsOncePerCall(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n%3 != 0 { // each call fails twice, then succeeds
				return status.Error(codes.Unavailable, "not yet")
			}
			return answer(ss)
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(time.Millisecond)},
			retrygrpc.Idempotent(methodGet, methodWatch))
		defer stop()

		var f finishes
		_, err := invoke(t.Context(), conn, methodGet, f.option())
		require.NoError(t, err)
		_, err = recvAll(watch(t.Context(), t, conn, f.option()))
		require.NoError(t, err)
		assert.Equal(t, []error{nil, nil}, f.wait(t, exact, 2), "once per call, with its success")
		assert.Equal(t, 6, s.count())

		// Failed calls: once, with the error the call returned.
		s.handle = fail(codes.Unavailable)
		f = finishes{}
		_, err = invoke(t.Context(), conn, methodGet, f.option(), retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 2}))
		require.Error(t, err)
		cs := watch(t.Context(), t, conn, f.option(), retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 2}))
		_, serr := recvAll(cs)
		require.Error(t, serr)
		got := f.wait(t, exact, 2)
		require.Len(t, got, 2)
		assert.Same(t, err, got[0], "unary: the call's own error")
		assert.Same(t, serr, got[1], "server-streaming: the call's own error")
		assert.Equal(t, codes.Unavailable, status.Code(got[0]))
		assert.ErrorIs(t, got[1], retry.ErrExhausted)
	})
}

// A call that stops before any attempt still finishes once.
func TestOnFinishWithoutAttempts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error { return answer(ss) })
		lim := rate.NewLimiter(rate.Every(time.Minute), 1)
		conn, stop := start(t, nw, s, retry.Policy{Limiter: retry.RateLimiter(lim)})
		defer stop()
		require.True(t, lim.Allow())
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()

		var f finishes
		_, err := invoke(ctx, conn, methodGet, f.option())
		require.Error(t, err)
		_, serr := conn.NewStream(ctx, uploadDesc, methodUpload, f.option())
		require.Error(t, serr)
		got := f.wait(t, exact, 2)
		require.Len(t, got, 2)
		assert.Same(t, err, got[0])
		assert.Same(t, serr, got[1])
		assert.Equal(t, codes.DeadlineExceeded, status.Code(got[1]))
		assert.Zero(t, s.count())
	})
}
