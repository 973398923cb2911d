package retrygrpc_test

import (
	"context"
	"errors"
	"fmt"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// gauge counts what is in flight at once, and the most seen.
type gauge struct{ now, peak atomic.Int64 }

func (g *gauge) enter() int64 {
	n := g.now.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	return n
}

func (g *gauge) leave() { g.now.Add(-1) }

// until is the method of the Reason of a call a breaker refused.
type until interface{ Until() time.Time }

// Many unary calls sharing a ConcurrencyLimit, each failing once with
// UNAVAILABLE before it succeeds, never put more calls in the server's
// handler at once than the limit's slots, and every slot comes back. The
// first calls to reach the handler wait there until every slot is taken,
// so the limit is used whole, and a bound that let more through would show.
// A unary attempt ends when the call's status arrives, which the server
// sends once its handler has returned, so the handler's count is exact.
func TestConcurrencyLimitBoundsTheServerWithRetries(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		const slots, callers, calls = 3, 12, 3
		lim := &retry.ConcurrencyLimit{Slots: slots}
		var g gauge
		var arrived atomic.Int64
		full := make(chan struct{})
		var fullOnce sync.Once
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			defer g.leave()
			if g.enter() == slots {
				fullOnce.Do(func() { close(full) })
			}
			if arrived.Add(1) <= slots {
				select {
				case <-full:
				case <-time.After(10 * time.Second):
					t.Error("the first calls never had every slot at once")
				}
			}
			if attemptOf(ss) == 1 {
				return status.Error(codes.Unavailable, "busy")
			}
			return reply(ss, "ok")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(time.Millisecond), Concurrency: lim},
			retrygrpc.Idempotent(methodGet))
		defer stop()

		var wg sync.WaitGroup
		var ok atomic.Int64
		for range callers {
			wg.Go(func() {
				for range calls {
					if v, err := invoke(t.Context(), conn, methodGet); assert.NoError(t, err) && v == "ok" {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(callers*calls), ok.Load(), "every call succeeded on its retry")
		assert.Equal(t, 2*callers*calls, s.count(), "two attempts per call reached the server")
		assert.Equal(t, int64(slots), g.peak.Load(), "calls in the server's handler at once, at most")
		assert.Zero(t, lim.InFlight(), "every slot given back")
		assert.Zero(t, lim.Waiting(), "no one left waiting")
	})
}

// Hedged unary calls sharing a ConcurrencyLimit: a hedge holds a slot, so
// the attempts in flight never exceed the slots, at the client or in the
// server's handler, and a hedge that finds no free slot does not start,
// the call going on with its first attempt. Each first attempt's answer is
// held back on the client's side, by an interceptor after retrygrpc's,
// once the server is done with it: its hedge, answered at once, wins, and
// the first attempt is cancelled while no handler of it runs. (A loser
// cancelled while the server still works on it gives its slot back as the
// client's attempt ends: see the package documentation.)
func TestConcurrencyLimitBoundsTheServerWithHedges(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		const slots, callers, calls = 3, 2, 8 // 2 callers hedging could have 4 attempts in flight
		const held = 500 * time.Millisecond
		lim := &retry.ConcurrencyLimit{Slots: slots}
		var atServer, atClient gauge
		var hedges atomic.Int64
		s := newServer(func(_ int, ss grpc.ServerStream) error {
			defer atServer.leave()
			atServer.enter()
			if attemptOf(ss) > 1 {
				hedges.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			return reply(ss, "ok")
		})
		holdFirst := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			atClient.enter()
			defer atClient.leave()
			err := invoker(ctx, method, req, rep, cc, opts...)
			if md, _ := metadata.FromOutgoingContext(ctx); err != nil || len(md.Get("grpc-previous-rpc-attempts")) > 0 {
				return err
			}
			timer := time.NewTimer(held)
			defer timer.Stop()
			select {
			case <-timer.C:
				return nil
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		lis, dial, _ := nw.listen(t)
		srv := s.serveOn(lis)
		defer srv.Stop()
		p := retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Concurrency: lim}
		conn := dialRaw(t, dial, true, p, []retrygrpc.Option{retrygrpc.Idempotent(methodGet)},
			grpc.WithChainUnaryInterceptor(holdFirst))
		defer conn.Close()
		ready(t, conn)

		var wg sync.WaitGroup
		var ok atomic.Int64
		for range callers {
			wg.Go(func() {
				for range calls {
					if v, err := invoke(t.Context(), conn, methodGet); assert.NoError(t, err) && v == "ok" {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(callers*calls), ok.Load(), "every call succeeded, hedged or not")
		assert.Positive(t, hedges.Load(), "the first hedge due finds a free slot")
		assert.LessOrEqual(t, atClient.peak.Load(), int64(slots), "attempts in flight at the client")
		assert.LessOrEqual(t, atServer.peak.Load(), int64(slots), "calls in the server's handler")
		assert.Zero(t, lim.InFlight(), "every slot given back")
		assert.Zero(t, lim.Waiting(), "no one left waiting")
	})
}

// A CircuitBreaker in the interceptor's policy opens on UNAVAILABLE, which
// the classifier retries, and never on NOT_FOUND or INVALID_ARGUMENT, which
// say nothing of the server's health. Once open, a call reaches no server
// and fails at once with an error for which errors.Is(err,
// retry.ErrBreakerOpen) holds, whose status is UNAVAILABLE; once OpenFor
// has passed, a probe reaches the server.
func TestBreakerOpensOnUnavailableOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code  codes.Code
		opens bool
	}{
		{codes.Unavailable, true},
		{codes.NotFound, false},
		{codes.InvalidArgument, false},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(fail(tt.code))
				cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Minute}
				conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 1, Breaker: cb}, retrygrpc.Idempotent(methodGet))
				defer stop()
				for range 5 {
					_, err := invoke(t.Context(), conn, methodGet)
					require.Equal(t, tt.code, status.Code(err))
					if cb.State(time.Now()) == "open" {
						break
					}
				}
				if !tt.opens {
					assert.Equal(t, 5, s.count(), "every call reached the server")
					assert.Equal(t, "closed", cb.State(time.Now()), "%v says nothing of the server's health", tt.code)
					return
				}
				require.Equal(t, "open", cb.State(time.Now()), "three failures in a row open it")
				require.Equal(t, 3, s.count())

				begin := time.Now()
				_, err := invoke(t.Context(), conn, methodGet)
				took := time.Since(begin)
				require.Error(t, err)
				assert.ErrorIs(t, err, retry.ErrBreakerOpen, "through the call's error")
				assert.Equal(t, codes.Unavailable, status.Code(err), "a refused call is UNAVAILABLE: %v", err)
				re := retryError(t, err)
				assert.Zero(t, re.Attempts, "no attempt made")
				var u until
				require.True(t, errors.As(re.Reason, &u), "the Reason says until when")
				assert.Equal(t, 3, s.count(), "no call reached the server")
				if exact {
					assert.Zero(t, took, "it failed at once")
				} else {
					assert.Less(t, took, realTimeSlack, "it failed at once: took %v", took)
				}
				if !exact {
					return // the probe waits OpenFor: virtual time only
				}
				time.Sleep(time.Until(u.Until()))
				_, err = invoke(t.Context(), conn, methodGet)
				assert.Equal(t, tt.code, status.Code(err), "the probe's own answer")
				assert.Equal(t, 4, s.count(), "the probe reached the server")
				assert.Equal(t, "open", cb.State(time.Now()), "its failure opened the breaker again")
			})
		})
	}
}

// A retrying call that the breaker stops after an UNAVAILABLE keeps the
// server's status, and errors.Is reaches retry.ErrBreakerOpen; a retry.Do
// around the call stops at once with the same reason.
func TestBreakerStopsARetryingCall(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		s := newServer(fail(codes.Unavailable))
		cb := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Minute}
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(0), Breaker: cb}, retrygrpc.Idempotent(methodGet))
		defer stop()
		_, err := invoke(t.Context(), conn, methodGet)
		assert.ErrorIs(t, err, retry.ErrBreakerOpen)
		st := status.Convert(err)
		assert.Equal(t, codes.Unavailable, st.Code())
		assert.Equal(t, "failing", st.Message(), "the server's status, unchanged")
		assert.Equal(t, 1, s.count(), "no retry was sent")

		outer := 0
		err = retry.Do(t.Context(), func(ctx context.Context) error {
			outer++
			_, err := invoke(ctx, conn, methodGet)
			return err
		}, retry.Policy{Backoff: retry.Constant(0), Classifier: retrygrpc.DefaultClassifier})
		assert.Equal(t, 1, outer, "a loop around the call does not retry the refusal")
		assert.ErrorIs(t, retryError(t, err).Reason, retry.ErrBreakerOpen)
	})
}

// A call that finds no slot stops with ErrNoSlot, reaching no server, with
// status UNAVAILABLE.
func TestNoSlotForAUnaryCall(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		s := newServer(func(int, grpc.ServerStream) error { return nil })
		lim := &retry.ConcurrencyLimit{Slots: 1, Queue: -1}
		conn, stop := start(t, nw, s, retry.Policy{Concurrency: lim})
		defer stop()
		release, err := lim.Acquire(t.Context(), time.Time{}) // another caller holds the slot
		require.NoError(t, err)
		defer release(0, nil)

		_, err = invoke(t.Context(), conn, methodGet)
		assert.ErrorIs(t, err, retry.ErrNoSlot)
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Zero(t, s.count(), "no call reached the server")
	})
}

// A stream's attempts take a slot too, but only until the stream commits
// (its first response header or message), when the attempt ends: the
// stream then runs outside the slot, however long it lasts. With one slot
// and no queue, a second stream is refused while the first one waits for
// its first message, and goes through once it has it.
func TestStreamAttemptHoldsASlotUntilCommit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		first, more := make(chan struct{}), make(chan struct{})
		s := newServer(func(n int, ss grpc.ServerStream) error {
			var req wrapperspb.StringValue
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			if n > 1 {
				return ss.SendMsg(wrapperspb.String("other"))
			}
			<-first
			if err := ss.SendMsg(wrapperspb.String("a")); err != nil {
				return err
			}
			<-more
			return ss.SendMsg(wrapperspb.String("b"))
		})
		lim := &retry.ConcurrencyLimit{Slots: 1, Queue: -1}
		conn, stop := start(t, nw, s, retry.Policy{Concurrency: lim}, retrygrpc.Idempotent(methodWatch))
		defer stop()

		a := watch(t.Context(), t, conn)
		got := make(chan string, 1)
		go func() {
			var m wrapperspb.StringValue
			if err := a.RecvMsg(&m); assert.NoError(t, err) {
				got <- m.GetValue()
			}
			close(got)
		}()
		require.Eventually(t, func() bool { return s.count() == 1 }, realTimeSlack, time.Millisecond)
		assert.Equal(t, 1, lim.InFlight(), "the attempt holds the slot until commit")
		_, err := recvAll(watch(t.Context(), t, conn))
		assert.ErrorIs(t, err, retry.ErrNoSlot, "a second stream finds no slot")
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Equal(t, 1, s.count(), "it reached no server")

		close(first)
		assert.Equal(t, "a", <-got)
		assert.Zero(t, lim.InFlight(), "committed, the stream holds no slot")
		other, err := recvAll(watch(t.Context(), t, conn))
		require.NoError(t, err)
		assert.Equal(t, []string{"other"}, other, "another stream goes through while the first is open")

		close(more)
		rest, err := recvAll(a)
		require.NoError(t, err)
		assert.Equal(t, []string{"b"}, rest)
		assert.Zero(t, lim.InFlight())
	})
}

// openBreaker opens cb at now, as the failures of other calls sharing it
// would, and returns until when it refuses.
func openBreaker(t *testing.T, cb *retry.CircuitBreaker, now time.Time) time.Time {
	t.Helper()
	for cb.State(now) != "open" {
		done, _ := cb.Allow(now)
		require.NotNil(t, done, "a closed breaker lets an attempt through")
		done(now, status.Error(codes.Unavailable, "elsewhere"))
	}
	_, until := cb.Allow(now)
	require.False(t, until.IsZero())
	return until
}

// An open breaker refuses a stream before any attempt: no stream reaches
// the server, and the call fails at once with status UNAVAILABLE, an error
// for which errors.Is(err, retry.ErrBreakerOpen) holds, and a Reason that
// says until when. A server-streaming call opens without an error, as it
// sends nothing until its first RecvMsg or Header: Header returns nothing
// and RecvMsg the refusal, every time it is called. A client-streaming or
// bidirectional call, whose loop runs as it opens, gets the refusal from
// NewStream.
func TestBreakerRefusesAStreamBeforeItOpens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method string
		desc   *grpc.StreamDesc
	}{{methodWatch, watchDesc}, {methodUpload, uploadDesc}, {methodChat, chatDesc}}
	for _, tt := range tests {
		t.Run(tt.desc.StreamName, func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(func(int, grpc.ServerStream) error { return nil })
				cb := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Minute}
				conn, stop := start(t, nw, s, retry.Policy{Breaker: cb}, retrygrpc.Idempotent(tt.method))
				defer stop()
				open := openBreaker(t, cb, time.Now())

				begin := time.Now()
				var err error
				if tt.desc.ClientStreams {
					var cs grpc.ClientStream
					cs, err = conn.NewStream(t.Context(), tt.desc, tt.method)
					assert.Nil(t, cs)
				} else {
					cs := watch(t.Context(), t, conn) // opens, sends and closes without an error
					md, herr := cs.Header()
					assert.NoError(t, herr, "Header tells nothing, as gRPC's: RecvMsg says how the stream ended")
					assert.Nil(t, md)
					err = cs.RecvMsg(new(wrapperspb.StringValue))
					assert.Equal(t, err, cs.RecvMsg(new(wrapperspb.StringValue)), "the same error again")
					assert.Nil(t, cs.Trailer(), "no attempt, no trailer")
				}
				took := time.Since(begin)
				require.Error(t, err)
				assert.ErrorIs(t, err, retry.ErrBreakerOpen, "through the call's error")
				assert.Equal(t, codes.Unavailable, status.Code(err), "a refused stream is UNAVAILABLE: %v", err)
				re := retryError(t, err)
				assert.Zero(t, re.Attempts, "no attempt made")
				var u until
				if assert.True(t, errors.As(re.Reason, &u), "the Reason says until when") {
					assert.Equal(t, open, u.Until())
				}
				if exact {
					assert.Zero(t, took, "it failed at once")
				} else {
					assert.Less(t, took, realTimeSlack, "it failed at once: took %v", took)
				}
				assert.Zero(t, s.count(), "no stream reached the server")
				assert.Equal(t, "open", cb.State(time.Now()), "a refusal changes nothing")
			})
		})
	}
}

// Server-streaming calls that fail with UNAVAILABLE before commit count as
// failures: with Failures 3, the third one in a row opens the breaker, and
// the next stream reaches no server and is refused. A retrying stream's
// attempts count each: one stream that is failed on every attempt opens
// the breaker itself and stops with the server's status, errors.Is
// reaching retry.ErrBreakerOpen, no retry sent past it.
func TestStreamFailuresBeforeCommitOpenTheBreaker(t *testing.T) {
	t.Parallel()
	t.Run("one attempt each", func(t *testing.T) {
		t.Parallel()
		each(t, func(t *testing.T, nw network, _ bool) {
			s := newServer(fail(codes.Unavailable))
			cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Minute}
			conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 1, Breaker: cb}, retrygrpc.Idempotent(methodWatch))
			defer stop()
			for n := 1; n <= 3; n++ {
				assert.Equal(t, "closed", cb.State(time.Now()), "before stream %d", n)
				_, err := recvAll(watch(t.Context(), t, conn))
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.ErrorIs(t, err, retry.ErrExhausted)
			}
			assert.Equal(t, "open", cb.State(time.Now()), "three failures in a row open it")
			assert.Equal(t, 3, s.count())

			_, err := recvAll(watch(t.Context(), t, conn))
			assert.ErrorIs(t, err, retry.ErrBreakerOpen)
			assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			assert.Zero(t, retryError(t, err).Attempts, "no attempt made")
			assert.Equal(t, 3, s.count(), "the refused stream reached no server")
		})
	})
	t.Run("one stream retrying", func(t *testing.T) {
		t.Parallel()
		each(t, func(t *testing.T, nw network, _ bool) {
			s := newServer(fail(codes.Unavailable))
			cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Minute}
			conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Breaker: cb},
				retrygrpc.Idempotent(methodWatch))
			defer stop()
			_, err := recvAll(watch(t.Context(), t, conn))
			assert.ErrorIs(t, err, retry.ErrBreakerOpen)
			st := status.Convert(err)
			assert.Equal(t, codes.Unavailable, st.Code())
			assert.Equal(t, "failing", st.Message(), "the server's status, unchanged")
			assert.Equal(t, 3, retryError(t, err).Attempts)
			assert.Equal(t, 3, s.count(), "no retry sent once the breaker opened")
			assert.Equal(t, "open", cb.State(time.Now()))
		})
	})
}

// A stream that fails after commit has counted as a success in the
// breaker, as the package documentation says: its attempt ended, and the
// breaker was told, when its first response header or message arrived (a
// client-streaming or bidirectional stream's, when it opened). With
// Failures 3, two streams failing before commit, then one failing with
// UNAVAILABLE after commit, then two more before commit leave the breaker
// closed: the committed one ended the run of failures, as a success does
// (as a failure it would have opened the breaker; as no news, the fourth
// stream would have). A sixth failure before commit, the third in a row,
// opens it.
func TestStreamFailureAfterCommitCountsAsSuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		committed handler                                              // the third stream's: fails with UNAVAILABLE after commit
		call      func(*testing.T, *grpc.ClientConn) ([]string, error) // makes the third stream
		want      []string
	}{
		{"after its first message", func(_ int, ss grpc.ServerStream) error {
			return send(ss, status.Error(codes.Unavailable, "gone"), "a")
		}, watchAll, []string{"a"}},
		{"after its header", func(_ int, ss grpc.ServerStream) error {
			if err := ss.SendHeader(metadata.Pairs("k", "v")); err != nil {
				return err
			}
			return send(ss, status.Error(codes.Unavailable, "gone"))
		}, watchAll, nil},
		{"bidirectional, once opened", func(int, grpc.ServerStream) error {
			return status.Error(codes.Unavailable, "gone")
		}, func(t *testing.T, conn *grpc.ClientConn) ([]string, error) {
			cs, err := conn.NewStream(t.Context(), chatDesc, methodChat)
			require.NoError(t, err, "it commits as it opens")
			return recvAll(cs)
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, nw network, _ bool) {
				s := newServer(func(n int, ss grpc.ServerStream) error {
					if n == 3 {
						return tt.committed(n, ss)
					}
					return status.Error(codes.Unavailable, "failing")
				})
				cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Minute}
				conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 1, Breaker: cb},
					retrygrpc.Idempotent(methodWatch, methodChat))
				defer stop()
				failBeforeCommit := func(n int) {
					t.Helper()
					_, err := watchAll(t, conn)
					assert.ErrorIs(t, err, retry.ErrExhausted, "stream %d failed before commit", n)
					assert.Equal(t, codes.Unavailable, status.Code(err))
				}

				failBeforeCommit(1)
				failBeforeCommit(2)
				got, err := tt.call(t, conn)
				assert.Equal(t, tt.want, got)
				assert.Equal(t, "rpc error: code = Unavailable desc = gone", fmt.Sprint(err), "returned as it is")
				assert.Equal(t, "closed", cb.State(time.Now()), "a failure after commit does not open it")
				failBeforeCommit(4)
				failBeforeCommit(5)
				assert.Equal(t, "closed", cb.State(time.Now()), "the committed stream ended the run of failures")
				assert.Equal(t, 5, s.count(), "every stream reached the server")
				failBeforeCommit(6)
				assert.Equal(t, "open", cb.State(time.Now()), "three failures in a row since")
			})
		})
	}
}

// A stream that the server answers with NOT_FOUND before commit says
// nothing of the server's health: it counts for the breaker neither as a
// failure nor as a success. Five of them leave it closed, every one
// reaching the server; after two UNAVAILABLE, a NOT_FOUND does not end the
// run of failures, and the next UNAVAILABLE, the third, opens it.
func TestStreamNotFoundDoesNotCountInTheBreaker(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, _ bool) {
		codeOf := func(n int) codes.Code {
			if n == 6 || n == 7 || n == 9 {
				return codes.Unavailable
			}
			return codes.NotFound
		}
		s := newServer(func(n int, _ grpc.ServerStream) error { return status.Error(codeOf(n), "failing") })
		cb := &retry.CircuitBreaker{Failures: 3, OpenFor: time.Minute}
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 1, Breaker: cb}, retrygrpc.Idempotent(methodWatch))
		defer stop()
		for n := 1; n <= 9; n++ {
			require.Equal(t, "closed", cb.State(time.Now()), "before stream %d", n)
			_, err := watchAll(t, conn)
			assert.Equal(t, codeOf(n), status.Code(err), "stream %d: %v", n, err)
			assert.Equal(t, 1, retryError(t, err).Attempts, "stream %d", n)
			if n == 5 {
				assert.Equal(t, 5, s.count(), "every NOT_FOUND stream reached the server")
			}
		}
		assert.Equal(t, "open", cb.State(time.Now()), "three UNAVAILABLE, the NOT_FOUND between them not counted")
		assert.Equal(t, 9, s.count())
	})
}

// watchAll makes a server-streaming call and receives until it ends.
func watchAll(t *testing.T, conn *grpc.ClientConn) ([]string, error) {
	t.Helper()
	return recvAll(watch(t.Context(), t, conn))
}
