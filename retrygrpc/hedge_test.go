package retrygrpc_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// attempts lets a test's handler know which attempt of a call it serves,
// and wait for another attempt's arrival, so that on TCP the order a test
// needs holds however loaded the machine; it counts the attempts the
// client cut.
type attempts struct {
	mu      sync.Mutex
	arrived map[int]chan struct{}
	cut     atomic.Int32
}

func newAttempts() *attempts {
	a := &attempts{}
	a.start()
	return a
}

// start begins a new call, whose attempts count from 1 again.
func (a *attempts) start() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.arrived = map[int]chan struct{}{}
}

// arrive records that an attempt reached the server and returns its number,
// read from grpc-previous-rpc-attempts.
func (a *attempts) arrive(ss grpc.ServerStream) int {
	n := attemptOf(ss)
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch := a.ch(n); !closed(ch) {
		close(ch)
	}
	return n
}

// attemptOf returns the number of the attempt ss serves: 1 more than its
// grpc-previous-rpc-attempts.
func attemptOf(ss grpc.ServerStream) int {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
		if p, err := strconv.Atoi(v[0]); err == nil {
			return p + 1
		}
	}
	return 1
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ch returns the channel closed when attempt n arrives. Call with mu held.
func (a *attempts) ch(n int) chan struct{} {
	if a.arrived[n] == nil {
		a.arrived[n] = make(chan struct{})
	}
	return a.arrived[n]
}

// await waits until attempt n has arrived, or ss's context ends.
func (a *attempts) await(ss grpc.ServerStream, n int) {
	a.mu.Lock()
	ch := a.ch(n)
	a.mu.Unlock()
	select {
	case <-ch:
	case <-ss.Context().Done():
	}
}

// hangUntilCut blocks until the client cuts the attempt, and counts it.
func (a *attempts) hangUntilCut(ss grpc.ServerStream) error {
	<-ss.Context().Done()
	a.cut.Add(1)
	return status.FromContextError(ss.Context().Err()).Err()
}

// schedule records when each attempt of a call started and ended, from the
// call's start, as a client interceptor below the retrying one sees them:
// every attempt, a loser that also succeeded included (Observe does not see
// those). It tells the attempts apart by their grpc-previous-rpc-attempts.
type schedule struct {
	mu           sync.Mutex
	begin        time.Time
	starts, ends map[int]time.Duration
}

// reset begins a new call.
func (s *schedule) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begin, s.starts, s.ends = time.Now(), map[int]time.Duration{}, map[int]time.Duration{}
}

// option returns the dial option that installs the recording interceptor.
func (s *schedule) option() grpc.DialOption {
	s.reset()
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n := 1
		if v := metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts"); len(v) == 1 {
			p, _ := strconv.Atoi(v[0])
			n = p + 1
		}
		s.mu.Lock()
		s.starts[n] = time.Since(s.begin)
		s.mu.Unlock()
		err := invoker(ctx, method, req, reply, cc, opts...)
		s.mu.Lock()
		s.ends[n] = time.Since(s.begin)
		s.mu.Unlock()
		return err
	})
}

// started returns when attempts 1, 2, ... started, -1 for one that did not.
func (s *schedule) started() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for n, d := range s.starts {
		for len(out) < n {
			out = append(out, -1)
		}
		out[n-1] = d
	}
	return out
}

// startSeen is start with s recording the client's attempts.
func startSeen(t *testing.T, nw network, srv *server, s *schedule, p retry.Policy,
	opts ...retrygrpc.Option) (*grpc.ClientConn, func()) {
	t.Helper()
	lis, dial, _ := nw.listen(t)
	running := srv.serveOn(lis)
	conn := dialRaw(t, dial, true, p, opts, s.option())
	ready(t, conn)
	return conn, func() {
		conn.Close()
		running.Stop()
	}
}

// A slow first attempt is hedged after the delay, the hedge's reply is the
// call's, and the server sees the first attempt cancelled. The hedge
// carries grpc-previous-rpc-attempts, as A6 asks, and Observe sees it as
// a hedge.
func TestHedgeWinsOverASlowFirstAttempt(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		a := newAttempts()
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			if a.arrive(ss) == 1 {
				return a.hangUntilCut(ss)
			}
			a.await(ss, 1) // the first attempt has reached the server before the hedge can win
			return reply(ss, "from the hedge")
		})
		var events []retry.Event
		p := retrygrpc.HedgingPolicy(2, 10*time.Millisecond, codes.Unavailable)
		p.Observe = func(_ context.Context, e retry.Event) { events = append(events, e) }
		var sched schedule
		conn, stop := startSeen(t, nw, s, &sched, p, retrygrpc.Idempotent(methodGet))
		defer stop()
		var f finishes

		sched.reset()
		begin := time.Now()
		got, err := invoke(t.Context(), conn, methodGet, f.option())
		took := time.Since(begin)
		require.NoError(t, err)
		assert.Equal(t, "from the hedge", got)
		assertTook(t, exact, took, 10*time.Millisecond)
		assertStarts(t, exact, &sched, 0, 10*time.Millisecond)
		assert.ElementsMatch(t, []string{"", "1"}, s.previous())
		if assert.Len(t, events, 3) {
			assert.Equal(t, 2, events[0].Attempt)
			assert.True(t, events[0].Hedge)
			assert.NoError(t, events[0].Err, "the hedge won")
			assert.Equal(t, 1, events[1].Attempt)
			assert.False(t, events[1].Hedge)
			assert.Equal(t, codes.Canceled, status.Code(events[1].Err), "the first attempt was cut")
			assert.True(t, events[2].Done)
		}
		settled(t, exact, func() bool { return a.cut.Load() == 1 }, "the server saw the first attempt cancelled")
		assert.Equal(t, []error{nil}, f.wait(t, exact, 1), "OnFinish runs once, for the call")
	})
}

// assertStarts checks when the attempts started: exactly in a bubble, and
// no earlier in real time.
func assertStarts(t *testing.T, exact bool, s *schedule, want ...time.Duration) {
	t.Helper()
	got := s.started()
	if exact {
		assert.Equal(t, want, got, "when the attempts started")
		return
	}
	if assert.Len(t, got, len(want), "attempts") {
		for i := range want {
			assert.GreaterOrEqual(t, got[i], want[i], "attempt %d started at %v, want no earlier than %v", i+1, got[i], want[i])
		}
	}
}

// A first attempt that answers before the hedge delay is the whole call.
func TestHedgeNotNeeded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error { return reply(ss, "ok") })
		conn, stop := start(t, nw, s, retrygrpc.HedgingPolicy(4, time.Minute, codes.Unavailable),
			retrygrpc.Idempotent(methodGet))
		defer stop()
		got, err := invoke(t.Context(), conn, methodGet)
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		assert.Equal(t, 1, s.count())
	})
}

// A status that is not in nonFatal, from any attempt, ends the call with
// it, and the others are cancelled.
func TestHedgeFatalStatusEndsTheCall(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		a := newAttempts()
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			if n := a.arrive(ss); n != 2 {
				return a.hangUntilCut(ss)
			}
			a.await(ss, 1)
			return status.Error(codes.InvalidArgument, "bad request")
		})
		conn, stop := start(t, nw, s, retrygrpc.HedgingPolicy(3, 10*time.Millisecond, codes.Unavailable),
			retrygrpc.Idempotent(methodGet))
		defer stop()

		begin := time.Now()
		_, err := invoke(t.Context(), conn, methodGet)
		took := time.Since(begin)
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Equal(t, "bad request", status.Convert(err).Message())
		assert.ErrorIs(t, err, retry.ErrNotRetryable)
		assertTook(t, exact, took, 10*time.Millisecond)
		re := retryError(t, err)
		assert.True(t, re.OutcomeUnknown, "the first attempt was cut in flight")
		if exact {
			assert.Equal(t, 2, re.Attempts)
			assert.Equal(t, 2, s.count())
		}
		// On TCP a hedge that answers late lets a third start; it is cut too.
		settled(t, exact, func() bool { return int(a.cut.Load()) == s.count()-1 },
			"the server saw every other attempt cancelled")
	})
}

// A non-fatal status lets the others run, and sends the next hedge at once
// instead of at its delay (A6); when the attempts run out, the one still in
// flight may win. When every attempt fails with a non-fatal status, the
// call fails with the last one, having sent each next attempt at once.
func TestHedgeNonFatalStatusLetsTheOthersRun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		a := newAttempts()
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			if a.arrive(ss) == 1 {
				a.await(ss, 3)
				return reply(ss, "first")
			}
			return status.Error(codes.Unavailable, "busy")
		})
		var sched schedule
		conn, stop := startSeen(t, nw, s, &sched,
			retrygrpc.HedgingPolicy(3, 10*time.Millisecond, codes.Unavailable, codes.Internal), retrygrpc.Idempotent(methodGet))
		defer stop()

		sched.reset()
		got, err := invoke(t.Context(), conn, methodGet)
		require.NoError(t, err)
		assert.Equal(t, "first", got)
		assertStarts(t, exact, &sched, 0, 10*time.Millisecond, 10*time.Millisecond)

		s.handle = func(_ int, ss grpc.ServerStream) error { return status.Error(codes.Internal, "oops") }
		sched.reset()
		begin := time.Now()
		_, err = invoke(t.Context(), conn, methodGet)
		took := time.Since(begin)
		assert.Equal(t, codes.Internal, status.Code(err), "the last attempt's status")
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 3, retryError(t, err).Attempts)
		assertTook(t, exact, took, 0)
		assertStarts(t, exact, &sched, 0, 0, 0)
	})
}

// A server's pushback of n ms sends the next hedge n ms later, instead of
// at its delay, and the hedges after it resume at the delay (A6: "n +
// hedgingDelay").
func TestHedgePushbackHoldsTheNextHedge(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		a := newAttempts()
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			switch a.arrive(ss) {
			case 2:
				return pushBack(ss, codes.Unavailable, "100")
			case 4:
				a.await(ss, 1)
				return reply(ss, "fourth")
			}
			return a.hangUntilCut(ss)
		})
		var sched schedule
		conn, stop := startSeen(t, nw, s, &sched, retrygrpc.HedgingPolicy(4, 10*time.Millisecond, codes.Unavailable),
			retrygrpc.Idempotent(methodGet))
		defer stop()

		sched.reset()
		begin := time.Now()
		got, err := invoke(t.Context(), conn, methodGet)
		took := time.Since(begin)
		require.NoError(t, err)
		assert.Equal(t, "fourth", got)
		assertTook(t, exact, took, 120*time.Millisecond)
		// On TCP a pushback that comes back late may find the third hedge
		// sent at its delay: there only the fourth's start is sure.
		if exact {
			assertStarts(t, exact, &sched, 0, 10*time.Millisecond, 110*time.Millisecond, 120*time.Millisecond)
		}
		settled(t, exact, func() bool { return a.cut.Load() == 2 }, "the server saw attempts 1 and 3 cancelled")
	})
}

// A pushback that says not to retry sends no more hedges; the attempt in
// flight may still win (A6). If it fails, the call stops with the
// refusal's reason, and no retry.
func TestHedgePushbackRefusalStopsTheHedging(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		a := newAttempts()
		var firstErr atomic.Pointer[error]
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			if a.arrive(ss) == 2 {
				return pushBack(ss, codes.Unavailable, "-1")
			}
			a.await(ss, 2)
			// Long enough after the refusal for hedges at the 10ms delay,
			// had they been sent, to start first.
			time.Sleep(50 * time.Millisecond)
			if err := firstErr.Load(); err != nil {
				return *err
			}
			return reply(ss, "first")
		})
		var sched schedule
		conn, stop := startSeen(t, nw, s, &sched, retrygrpc.HedgingPolicy(5, 10*time.Millisecond, codes.Unavailable),
			retrygrpc.Idempotent(methodGet))
		defer stop()

		sched.reset()
		a.start()
		got, err := invoke(t.Context(), conn, methodGet)
		require.NoError(t, err)
		assert.Equal(t, "first", got, "the attempt in flight won")
		// On TCP a refusal that comes back late may find the next hedge
		// sent at its delay; in the bubble none is.
		if exact {
			assertStarts(t, exact, &sched, 0, 10*time.Millisecond)
		}

		unavailable := status.Error(codes.Unavailable, "busy")
		firstErr.Store(&unavailable)
		sched.reset()
		a.start()
		_, err = invoke(t.Context(), conn, methodGet)
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrNotRetryable, "the server's refusal")
		assert.Equal(t, len(sched.started()), retryError(t, err).Attempts, "no retry after the refusal")
		if exact {
			assertStarts(t, exact, &sched, 0, 10*time.Millisecond)
		}
	})
}

// Only unary calls of methods declared idempotent are hedged. A call of any
// other method, a stream, and a call whose reply is not a proto.Message (a
// custom codec's) make their attempts one at a time: with a hedge delay of
// 0, a hedged call sends them all at once, as one with an idempotency key
// does.
func TestHedgeOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			time.Sleep(20 * time.Millisecond)
			return answer(ss)
		})
		var sched schedule
		conn, stop := startSeen(t, nw, s, &sched, retrygrpc.HedgingPolicy(4, 0, codes.Unavailable),
			retrygrpc.Idempotent(methodGet, methodWatch))
		defer stop()

		sched.reset()
		got, err := invoke(t.Context(), conn, methodCreate)
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		assert.Len(t, sched.started(), 1, "a method not declared idempotent")
		assert.Equal(t, 1, s.count())

		values, err := recvAll(watch(t.Context(), t, conn))
		require.NoError(t, err)
		assert.Equal(t, []string{"ok"}, values)
		assert.Equal(t, 2, s.count(), "a stream")

		sched.reset()
		var raw rawMessage
		req := &rawMessage{b: []byte{0x0a, 3, 'r', 'e', 'q'}} // a StringValue, as the server reads it
		require.NoError(t, conn.Invoke(t.Context(), methodGet, req, &raw, grpc.ForceCodecV2(rawCodec{})))
		assert.Equal(t, []byte{0x0a, 2, 'o', 'k'}, raw.b)
		assert.Len(t, sched.started(), 1, "a reply that is not a proto.Message")
		assert.Equal(t, 3, s.count())

		sched.reset()
		keyed := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k")
		got, err = invoke(keyed, conn, methodCreate)
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		assertStarts(t, exact, &sched, 0, 0, 0, 0) // a call with an idempotency key is hedged
	})
}

// A method that grpc-go's own retries cover is not hedged: each hedge would
// be a whole retry loop of grpc-go's.
func TestHedgeNotOverGRPCRetries(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			time.Sleep(20 * time.Millisecond)
			return reply(ss, "ok")
		})
		lis, dial, _ := nw.listen(t)
		srv := s.serveOn(lis)
		defer srv.Stop()
		var sched schedule
		method := "/test.Store/GetHedged" + nw.name
		conn := dialRaw(t, dial, false, retrygrpc.HedgingPolicy(3, 0, codes.Unavailable),
			[]retrygrpc.Option{retrygrpc.Idempotent(method)}, grpc.WithDefaultServiceConfig(retryingServiceConfig),
			sched.option())
		defer conn.Close()
		ready(t, conn) // the service config is known once the resolver has spoken

		sched.reset()
		got, err := invoke(t.Context(), conn, method)
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		assert.Len(t, sched.started(), 1)
		assert.Equal(t, 1, s.count())
	})
}

// The caller's reply holds the winner's, whichever attempt won, and nothing
// of what it held before or of any loser's: many calls at once, each
// sending all its attempts at once, every attempt answering after a delay
// of its own. Run with -race.
func TestHedgeReplyIsTheWinners(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			var req wrapperspb.StringValue
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(ss.Context())
			attempt := "1"
			if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
				p, _ := strconv.Atoi(v[0])
				attempt = strconv.Itoa(p + 1)
			}
			select {
			case <-time.After(time.Duration(n*7%5) * time.Millisecond):
			case <-ss.Context().Done():
				return ss.Context().Err()
			}
			if attempt == "1" {
				return ss.SendMsg(wrapperspb.String("")) // an empty reply: nothing of the old value may stay
			}
			return ss.SendMsg(wrapperspb.String(req.GetValue() + " attempt " + attempt))
		})
		conn, stop := start(t, nw, s, retry.Policy{}, retrygrpc.Idempotent(methodGet))
		defer stop()

		var wg sync.WaitGroup
		winners := make([]int, 4)
		var mu sync.Mutex
		for g := range 8 {
			wg.Go(func() {
				for i := range 25 {
					var winner int
					p := retrygrpc.HedgingPolicy(4, 0, codes.Unavailable)
					p.Observe = func(_ context.Context, e retry.Event) {
						if !e.Done && e.Err == nil && winner == 0 {
							winner = e.Attempt // the first success won; a loser's may follow
						}
					}
					req := fmt.Sprintf("call %d.%d", g, i)
					reply := wrapperspb.String("stale")
					err := conn.Invoke(t.Context(), methodGet, wrapperspb.String(req), reply, retrygrpc.CallPolicy(p))
					if !assert.NoError(t, err) {
						return
					}
					want := req + " attempt " + strconv.Itoa(winner)
					if winner == 1 {
						want = ""
					}
					assert.Equal(t, want, reply.GetValue())
					mu.Lock()
					winners[winner-1]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("calls won by attempts 1-4: %v", winners)
		if exact {
			assert.Positive(t, winners[0], "the first attempt won some")
			assert.Positive(t, winners[1]+winners[2]+winners[3], "hedges won some")
		}
	})
}

// HedgingPolicy normalises what A6 would refuse, and maps the rest.
func TestHedgingPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxAttempts int
		delay       time.Duration
		nonFatal    []codes.Code
		attempts    int
		hedge       time.Duration
		retried     []codes.Code
	}{
		{"A6's example", 4, 500 * time.Millisecond, []codes.Code{codes.Unavailable, codes.Internal, codes.Aborted},
			4, 500 * time.Millisecond, []codes.Code{codes.Unavailable, codes.Internal, codes.Aborted}},
		{"no attempts", 0, time.Second, nil, 1, time.Second, nil},
		{"negative attempts", -3, time.Second, nil, 1, time.Second, nil},
		{"above A6's cap of 5", 7, time.Second, nil, 7, time.Second, nil},
		{"negative delay", 2, -time.Second, nil, 2, 0, nil},
		{"OK and unknown codes ignored", 2, 0, []codes.Code{codes.OK, codes.Code(17), codes.Code(99), codes.DataLoss},
			2, 0, []codes.Code{codes.DataLoss}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := retrygrpc.HedgingPolicy(tt.maxAttempts, tt.delay, tt.nonFatal...)
			assert.Equal(t, tt.attempts, p.MaxAttempts)
			assert.Equal(t, tt.attempts, p.MaxInFlight, "every attempt may be in flight at once")
			require.NotNil(t, p.HedgeDelay)
			assert.Equal(t, tt.hedge, p.HedgeDelay.Delay(1, 0, 0.5))
			assert.Equal(t, time.Duration(0), p.Backoff.Delay(1, 0, 0.5), "no backoff")
			for c := codes.OK; c <= codes.Unauthenticated+1; c++ {
				want := retry.Stop
				for _, r := range tt.retried {
					if r == c {
						want = retry.Retry
					}
				}
				assert.Equal(t, want, p.Classifier(status.Error(c, "x")), "Classifier(%v)", c)
			}
			assert.Equal(t, retry.Stop, p.Classifier(fmt.Errorf("no status")), "an error without a status is UNKNOWN")
			assert.Equal(t, retry.Stop, p.Classifier(&retry.Error{Last: status.Error(codes.Unavailable, "x")}),
				"an inner loop's result")
		})
	}
}

// rawMessage and rawCodec are a codec of its own, whose messages are not
// proto.Messages: the bytes of the message as they are on the wire.
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" } // the server's default codec reads the bytes

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawMessage).b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawMessage).b = data.Materialize()
	return nil
}
