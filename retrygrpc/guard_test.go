package retrygrpc_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// longLived is a context of the caller's own type that never ends during
// the test, as a framework's request or worker context may be. A context
// derived from it with the standard library's functions needs a goroutine
// to learn when it ends, until the derived context is cancelled: so each
// guard that is never released leaves a goroutine behind.
type longLived struct{ done chan struct{} }

func (longLived) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c longLived) Done() <-chan struct{}     { return c.done }
func (longLived) Value(any) any               { return nil }
func (c longLived) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// watchers counts the goroutines that watch a context of a foreign type for
// its end on behalf of a context derived from it, goroutine by goroutine,
// as goleak does, so that the other tests running meanwhile do not count.
func watchers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("created by context.(*cancelCtx).propagateCancel"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// The guard that bounds a stream's attempts with AttemptTimeout is released
// however the stream ends: a client-streaming call's last RecvMsg returns
// nil, not an error, and a stream may also end with its connection.
func TestStreamGuardIsReleasedWhenTheStreamEnds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		ctx := longLived{done: make(chan struct{})}
		defer close(ctx.done) // so that a leaked watcher ends with the test
		s := newServer(func(_ int, ss grpc.ServerStream) error { return answer(ss) })
		conn, stop := start(t, nw, s, retry.Policy{AttemptTimeout: time.Minute}, retrygrpc.Idempotent(methodUpload))
		defer stop()
		// The other tests may have a stream or two in flight meanwhile, each
		// with its watcher until it ends.
		before, slack := watchers(), 5

		const uploads = 200
		var f finishes
		for range uploads {
			cs, err := conn.NewStream(ctx, uploadDesc, methodUpload, f.option())
			require.NoError(t, err)
			require.NoError(t, cs.SendMsg(wrapperspb.String("a")))
			require.NoError(t, cs.CloseSend())
			var m wrapperspb.StringValue
			require.NoError(t, cs.RecvMsg(&m)) // as generated code's CloseAndRecv does
			require.Equal(t, "ok", m.GetValue())
		}
		settled(t, exact, func() bool { return watchers() <= before+slack }, "the uploads' guards were not released")
		assert.Equal(t, make([]error, uploads), f.wait(t, exact, uploads), "each upload finished once, successfully")

		// Streams still open when their connection closes.
		const chats = 20
		for range chats {
			_, err := conn.NewStream(ctx, chatDesc, methodChat)
			require.NoError(t, err)
		}
		require.NoError(t, conn.Close())
		settled(t, exact, func() bool { return watchers() <= before+slack }, "the chats' guards were not released")
	})
}
