package retrygrpc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrygrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestUnaryRetriesUnavailableThenSucceeds(t *testing.T) {
	t.Parallel()
	for _, failures := range []int{1, 3} {
		t.Run(string(rune('0'+failures)), func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(func(n int, ss grpc.ServerStream) error {
					if n <= failures {
						return status.Error(codes.Unavailable, "busy")
					}
					return reply(ss, "ok")
				})
				conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(10 * time.Millisecond)},
					retrygrpc.Idempotent(methodGet))
				defer stop()

				begin := time.Now()
				got, err := invoke(t.Context(), conn, methodGet)
				took := time.Since(begin)
				require.NoError(t, err)
				assert.Equal(t, "ok", got)
				assert.Equal(t, failures+1, s.count())
				assertTook(t, exact, took, time.Duration(failures)*10*time.Millisecond)
			})
		})
	}
}

func TestUnaryGivesUpWithTheLastStatus(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(int, grpc.ServerStream) error {
			st, err := status.New(codes.Unavailable, "down for maintenance").WithDetails(wrapperspb.String("detail"))
			require.NoError(t, err)
			return st.Err()
		})
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(5 * time.Millisecond)},
			retrygrpc.Idempotent(methodGet))
		defer stop()

		_, err := invoke(t.Context(), conn, methodGet)
		require.Error(t, err)
		// What gRPC code sees is the server's status, unchanged...
		st := status.Convert(err)
		assert.Equal(t, codes.Unavailable, st.Code())
		assert.Equal(t, "down for maintenance", st.Message())
		require.Len(t, st.Details(), 1)
		assert.Equal(t, "detail", st.Details()[0].(*wrapperspb.StringValue).GetValue())
		// ...and the retry loop's account is there too.
		re := retryError(t, err)
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 3, re.Attempts)
		assert.Equal(t, codes.Unavailable, status.Code(re.Last))
		assert.Contains(t, err.Error(), "retry: gave up after 3 attempts (attempts exhausted)")
		assert.Equal(t, 3, s.count())
	})
}

// The server sees grpc-previous-rpc-attempts on every retry, once, counting
// the attempts before it, and not on the first attempt (gRFC A6).
func TestUnarySendsPreviousAttempts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(0)},
			retrygrpc.Idempotent(methodGet))
		defer stop()

		_, err := invoke(t.Context(), conn, methodGet)
		require.Error(t, err)
		assert.Equal(t, []string{"", "1", "2", "3"}, s.previous())

		// A new call counts from the start again.
		_, err = invoke(t.Context(), conn, methodGet, retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 2}))
		require.Error(t, err)
		assert.Equal(t, []string{"", "1", "2", "3", "", "1"}, s.previous())
	})
}

func TestUnaryStopsAtOnceOnCodesThatWillNotChange(t *testing.T) {
	t.Parallel()
	for _, c := range []codes.Code{
		codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.AlreadyExists,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.Unauthenticated,
		codes.Aborted, codes.Internal, codes.Unknown, codes.DataLoss, codes.Canceled, codes.ResourceExhausted,
	} {
		t.Run(c.String(), func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(fail(c))
				// Idempotent: only the code can stop it.
				conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(time.Second)},
					retrygrpc.Idempotent(methodGet))
				defer stop()

				begin := time.Now()
				_, err := invoke(t.Context(), conn, methodGet)
				took := time.Since(begin)
				assert.Equal(t, c, status.Code(err))
				assert.Equal(t, "failing", status.Convert(err).Message())
				assert.ErrorIs(t, err, retry.ErrNotRetryable)
				assert.Equal(t, 1, s.count())
				assertTook(t, exact, took, 0)
			})
		})
	}
}

// A call that may have taken effect is repeated only for a method declared
// idempotent: here the server answered UNAVAILABLE, or did not answer
// within the attempt's timeout.
func TestUnaryRepeatsAnUnknownOutcomeOnlyWhenIdempotent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handle  handler
		code    codes.Code
		timeout time.Duration
	}{
		{"UNAVAILABLE from the server", fail(codes.Unavailable), codes.Unavailable, 0},
		{"DEADLINE_EXCEEDED from the server", fail(codes.DeadlineExceeded), codes.DeadlineExceeded, 0},
		{"attempt timeout", func(_ int, ss grpc.ServerStream) error { return hang(ss) }, codes.DeadlineExceeded,
			50 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				timeout := tc.timeout
				if timeout > 0 && !exact {
					timeout = 500 * time.Millisecond // so that the request has time to reach the server
				}
				s := newServer(tc.handle)
				p := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), AttemptTimeout: timeout}
				conn, stop := start(t, nw, s, p, retrygrpc.Idempotent(methodGet))
				defer stop()
				// On TCP a loaded machine may cut an attempt before the server
				// sees it; the bubble's counts are exact.
				assertCalls := func(want int) {
					t.Helper()
					if exact || timeout == 0 {
						assert.Equal(t, want, s.count())
					} else {
						assert.LessOrEqual(t, s.count(), want)
					}
				}

				begin := time.Now()
				_, err := invoke(t.Context(), conn, methodCreate)
				took := time.Since(begin)
				assert.Equal(t, tc.code, status.Code(err))
				assert.ErrorIs(t, err, retry.ErrNotIdempotent)
				re := retryError(t, err)
				assert.Equal(t, 1, re.Attempts)
				assertOutcomeUnknown(t, re, true)
				assertCalls(1)
				assertTook(t, exact, took, timeout)

				_, err = invoke(t.Context(), conn, methodGet)
				assert.Equal(t, tc.code, status.Code(err))
				assert.ErrorIs(t, err, retry.ErrExhausted)
				assert.Equal(t, 3, retryError(t, err).Attempts)
				assertCalls(4)
			})
		})
	}
}

// assertOutcomeUnknown checks what a failed call says about whether it may
// have taken effect: its last attempt's error says it through a method the
// retry loop reads into Error.OutcomeUnknown.
func assertOutcomeUnknown(t *testing.T, re *retry.Error, want bool) {
	t.Helper()
	var o interface{ OutcomeUnknown() bool }
	require.True(t, errors.As(re.Last, &o), "the last error says nothing about its outcome: %v", re.Last)
	assert.Equal(t, want, o.OutcomeUnknown(), "OutcomeUnknown of %v", re.Last)
	assert.Equal(t, want, re.OutcomeUnknown, "Error.OutcomeUnknown")
}

// The ways to declare a call safe to repeat add up.
func TestUnaryIdempotencyDeclarations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []retrygrpc.Option
		ctx  func(context.Context) context.Context
		want int // calls the server sees
	}{
		{"none", nil, nil, 1},
		{"listed", []retrygrpc.Option{retrygrpc.Idempotent(methodCreate)}, nil, 3},
		{"another listed", []retrygrpc.Option{retrygrpc.Idempotent(methodGet)}, nil, 1},
		{"func", []retrygrpc.Option{retrygrpc.IdempotentFunc(func(_ context.Context, m string) bool {
			return m == methodCreate
		})}, nil, 3},
		{"func looking at the context", []retrygrpc.Option{retrygrpc.IdempotentFunc(func(ctx context.Context, _ string) bool {
			return len(metadata.ValueFromOutgoingContext(ctx, "request-id")) > 0
		})}, func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "request-id", "r1")
		}, 3},
		{"idempotency key", nil, func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "idempotency-key", "k1")
		}, 3},
		{"empty idempotency key", nil, func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "x-idempotency-key", "")
		}, 1},
		{"nil options", []retrygrpc.Option{nil, retrygrpc.IdempotentFunc(nil)}, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(fail(codes.Unavailable))
				conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}, tc.opts...)
				defer stop()
				ctx := t.Context()
				if tc.ctx != nil {
					ctx = tc.ctx(ctx)
				}
				_, err := invoke(ctx, conn, methodCreate)
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.Equal(t, tc.want, s.count())
			})
		})
	}
}

// A server's pushback is the least wait before the next attempt, as
// Retry-After is in HTTP, and proves it turned the call away: a method that
// is not idempotent is retried too.
func TestUnaryHonoursPushback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		code     codes.Code
		pushback string
		backoff  time.Duration
		want     time.Duration // the total wait for two retries
	}{
		{"pushback above backoff", codes.Unavailable, "250", 10 * time.Millisecond, 500 * time.Millisecond},
		{"backoff above pushback", codes.Unavailable, "5", 40 * time.Millisecond, 80 * time.Millisecond},
		{"zero pushback", codes.Unavailable, "0", 10 * time.Millisecond, 20 * time.Millisecond},
		{"leading zeros", codes.Unavailable, "0037", 0, 74 * time.Millisecond},
		{"RESOURCE_EXHAUSTED with pushback", codes.ResourceExhausted, "120", 0, 240 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(func(n int, ss grpc.ServerStream) error {
					if n <= 2 {
						return pushBack(ss, tc.code, tc.pushback)
					}
					return reply(ss, "ok")
				})
				var waits []time.Duration
				p := retry.Policy{Backoff: retry.Constant(tc.backoff), Observe: func(_ context.Context, ev retry.Event) {
					if ev.Retry {
						waits = append(waits, ev.Wait)
					}
				}}
				conn, stop := start(t, nw, s, p)
				defer stop()

				begin := time.Now()
				got, err := invoke(t.Context(), conn, methodCreate)
				took := time.Since(begin)
				require.NoError(t, err)
				assert.Equal(t, "ok", got)
				assert.Equal(t, 3, s.count())
				assert.Equal(t, []time.Duration{tc.want / 2, tc.want / 2}, waits)
				assertTook(t, exact, took, tc.want)
			})
		})
	}
}

func TestUnaryStopsAtOnceOnPushbackItCannotHonour(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		pushback []string
		deadline time.Duration // 0: none
		reason   error
	}{
		{"negative", []string{"-1"}, 0, retry.ErrNotRetryable},
		{"minus zero", []string{"-0"}, 0, nil}, // -0 is 0: a delay of nothing
		{"malformed", []string{"soon"}, 0, retry.ErrNotRetryable},
		{"empty", []string{""}, 0, retry.ErrNotRetryable},
		{"plus sign", []string{"+5"}, 0, retry.ErrNotRetryable},
		{"fraction", []string{"1.5"}, 0, retry.ErrNotRetryable},
		{"beyond int32", []string{"2147483648"}, 0, retry.ErrNotRetryable},
		{"two values", []string{"1", "2"}, 0, retry.ErrNotRetryable},
		{"above MaxRetryAfter", []string{"60001"}, 0, retry.ErrServerDelay},
		{"past the deadline", []string{"2000"}, time.Second, retry.ErrNoTimeLeft},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, nw network, exact bool) {
				s := newServer(func(n int, ss grpc.ServerStream) error {
					if n == 1 {
						return pushBack(ss, codes.Unavailable, tc.pushback...)
					}
					return reply(ss, "ok")
				})
				p := retry.Policy{Backoff: retry.Constant(0), MaxRetryAfter: time.Minute}
				conn, stop := start(t, nw, s, p, retrygrpc.Idempotent(methodGet))
				defer stop()
				ctx := t.Context()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}

				begin := time.Now()
				_, err := invoke(ctx, conn, methodGet)
				took := time.Since(begin)
				if tc.reason == nil {
					require.NoError(t, err)
					assert.Equal(t, 2, s.count())
					return
				}
				assert.ErrorIs(t, err, tc.reason)
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.Equal(t, 1, s.count())
				assertTook(t, exact, took, 0)
			})
		})
	}
}

// The go-grpc-middleware #261 case: a server that takes twice the
// per-attempt timeout to say NOT_FOUND. Each attempt must end at the timeout
// with DEADLINE_EXCEEDED, not wait for the server's answer, and the server
// must see the attempt's deadline. In a bubble the timeout is 5ms, as in the
// issue; on TCP it is 250ms, and an attempt that the machine's load makes
// slower than that is retried too, so only the bubble checks exact counts.
func TestUnaryAttemptTimeoutTimesOut(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		unit, late := 5*time.Millisecond, 10*time.Millisecond
		if !exact {
			// On a loaded machine the client's cancel can reach the server
			// after a late answer meant for 2 units; so on TCP the answer
			// comes too late for any machine, and only the cancel ends it.
			unit, late = 250*time.Millisecond, realTimeSlack
		}
		var slowOnes atomic.Int32
		slow := func(ss grpc.ServerStream) error {
			select {
			case <-time.After(late):
				return status.Error(codes.NotFound, "too late to matter")
			case <-ss.Context().Done():
				slowOnes.Add(1)
				return ss.Context().Err()
			}
		}
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n <= 2 {
				return slow(ss)
			}
			return reply(ss, "ok")
		})
		p := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(unit), AttemptTimeout: unit}
		conn, stop := start(t, nw, s, p, retrygrpc.Idempotent(methodGet))
		defer stop()

		begin := time.Now()
		got, err := invoke(t.Context(), conn, methodGet)
		took := time.Since(begin)
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
		for _, c := range s.seen() {
			assert.True(t, c.hasLimit, "the server saw no deadline")
			assert.LessOrEqual(t, c.deadline, unit)
		}
		// Two attempts cut at the timeout, two waits.
		if exact {
			assert.Equal(t, 3, s.count())
			assert.Equal(t, 4*unit, took)
		} else {
			assert.GreaterOrEqual(t, s.count(), 3)
			assertTook(t, exact, took, 4*unit)
		}

		// Every attempt cut: the call fails with DEADLINE_EXCEEDED, not NOT_FOUND.
		s.handle = func(_ int, ss grpc.ServerStream) error { return slow(ss) }
		before := s.count()
		_, err = invoke(t.Context(), conn, methodGet, retrygrpc.CallPolicy(retry.Policy{
			MaxAttempts: 2, Backoff: retry.Constant(0), AttemptTimeout: unit}))
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, 2, retryError(t, err).Attempts)
		if exact {
			assert.Equal(t, before+2, s.count())
			settled(t, exact, func() bool { return slowOnes.Load() == 4 }, "the server saw each slow attempt cancelled")
		} else {
			// On TCP a loaded machine may cut an attempt before the server
			// sees it, but the first two reached it and were cut.
			assert.LessOrEqual(t, s.count(), before+2)
			settled(t, exact, func() bool { return slowOnes.Load() >= 2 }, "the server saw the slow attempts cancelled")
		}
	})
}

// The caller's deadline bounds everything, and no wait runs into it: the
// benchmarks' deadline scenario, with backoffs of 40ms then 80ms and a 50ms
// deadline, gives up at 40ms, after the second attempt, keeping its status.
// On TCP, a loaded machine may make the second attempt end past the
// deadline, so there only the count is exact.
func TestUnaryNeverWaitsIntoTheDeadline(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Exponential{Base: 40 * time.Millisecond, Jitter: retry.NoJitter}}
		conn, stop := start(t, nw, s, p, retrygrpc.Idempotent(methodGet))
		defer stop()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()

		begin := time.Now()
		_, err := invoke(ctx, conn, methodGet)
		took := time.Since(begin)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.LessOrEqual(t, s.count(), 2)
		if exact {
			assert.ErrorIs(t, err, retry.ErrNoTimeLeft)
			assert.Equal(t, codes.Unavailable, status.Code(err), "the last attempt's status says what went wrong")
			assert.Equal(t, 2, s.count())
			assert.Equal(t, 40*time.Millisecond, took)
		}
		assert.Less(t, took, 50*time.Millisecond+realTimeSlack)
	})
}

// A call stopped before its first attempt for lack of time (the limiter's
// next token comes after the deadline) reports DEADLINE_EXCEEDED, as the
// deadline would have, and sends nothing.
func TestNoTimeForAFirstAttempt(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(_ int, ss grpc.ServerStream) error { return reply(ss, "ok") })
		lim := rate.NewLimiter(rate.Every(time.Minute), 1)
		conn, stop := start(t, nw, s, retry.Policy{Limiter: retry.RateLimiter(lim)}, retrygrpc.Idempotent(methodGet))
		defer stop()
		require.True(t, lim.Allow())
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()

		check := func(err error, what string) {
			t.Helper()
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err), what)
			assert.ErrorIs(t, err, retry.ErrNoTimeLeft, what)
			assert.ErrorIs(t, err, context.DeadlineExceeded, what)
			assert.Equal(t, 0, retryError(t, err).Attempts, what)
		}
		begin := time.Now()
		_, err := invoke(ctx, conn, methodGet)
		check(err, "unary")
		_, err = conn.NewStream(ctx, uploadDesc, methodUpload)
		check(err, "client-streaming")
		assertTook(t, exact, time.Since(begin), 0)
		assert.Zero(t, s.count())
	})
}

// CANCELLED caused by the caller is never retried, whether it comes during
// an attempt or during a wait, and the call reports CANCELLED.
func TestUnaryCallerCancelStops(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(func(n int, ss grpc.ServerStream) error {
			if n == 1 {
				return hang(ss)
			}
			return status.Error(codes.Unavailable, "busy")
		})
		conn, stop := start(t, nw, s, retry.Policy{Backoff: retry.Constant(time.Second)}, retrygrpc.Idempotent(methodGet))
		defer stop()

		for _, at := range []string{"during the attempt", "during the wait"} {
			ctx, cancel := context.WithCancel(t.Context())
			begin := time.Now()
			timer := time.AfterFunc(30*time.Millisecond, cancel)
			_, err := invoke(ctx, conn, methodGet)
			took := time.Since(begin)
			timer.Stop()
			cancel()
			assert.Equal(t, codes.Canceled, status.Code(err), at)
			assert.ErrorIs(t, err, context.Canceled, at)
			assert.Equal(t, 1, retryError(t, err).Attempts, at)
			assertTook(t, exact, took, 30*time.Millisecond)
		}
		if exact {
			assert.Equal(t, 2, s.count())
		} else {
			assert.LessOrEqual(t, s.count(), 2) // a loaded machine may cancel before a call arrives
		}
	})
}

func TestPerCallPolicies(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}, retrygrpc.Idempotent(methodGet))
		defer stop()

		_, err := invoke(t.Context(), conn, methodGet, retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 5}),
			retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 1}))
		assert.Equal(t, 1, retryError(t, err).Attempts, "the last CallPolicy counts")
		assert.Equal(t, 1, s.count())

		// A Classifier in the call's policy replaces the code table.
		stopAll := func(error) retry.Decision { return retry.Stop }
		_, err = invoke(t.Context(), conn, methodGet, retrygrpc.CallPolicy(retry.Policy{Classifier: stopAll}))
		assert.Equal(t, 1, retryError(t, err).Attempts)
		assert.Equal(t, 2, s.count())

		// No CallPolicy: the interceptor's.
		_, err = invoke(t.Context(), conn, methodGet)
		assert.Equal(t, 3, retryError(t, err).Attempts)
		assert.Equal(t, 5, s.count())

		// The context's policy, unless the call has its own.
		ctx := retrygrpc.WithPolicy(t.Context(), retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
		_, err = invoke(ctx, conn, methodGet)
		assert.Equal(t, 2, retryError(t, err).Attempts)
		_, err = invoke(ctx, conn, methodGet, retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 1}))
		assert.Equal(t, 1, retryError(t, err).Attempts)
		keyed := metadata.AppendToOutgoingContext(ctx, "idempotency-key", "k")
		_, err = recvAll(watch(keyed, t, conn))
		assert.Equal(t, 2, retryError(t, err).Attempts, "streams too")
		assert.Equal(t, 10, s.count())
	})
}

// settled checks that cond holds once what runs on the server after the
// client has its answer is done: at once after synctest.Wait in a bubble,
// and within realTimeSlack in real time.
func settled(t *testing.T, exact bool, cond func() bool, msg string) {
	t.Helper()
	if exact {
		synctest.Wait()
		assert.True(t, cond(), msg)
		return
	}
	assert.Eventually(t, cond, realTimeSlack, time.Millisecond, msg)
}

// Retry at one layer: a retry.Do around a call through the interceptor does
// not multiply its attempts, with the core's classifier or the gRPC table.
func TestUnaryErrorIsNotRetriedAgainOutside(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)}, retrygrpc.Idempotent(methodGet))
		defer stop()

		for _, c := range []retry.Classifier{nil, retrygrpc.DefaultClassifier} {
			before := s.count()
			err := retry.Do(t.Context(), func(ctx context.Context) error {
				_, err := invoke(ctx, conn, methodGet)
				return err
			}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), Classifier: c})
			assert.ErrorIs(t, err, retry.ErrAlreadyRetried)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Equal(t, 3, s.count()-before, "the inner loop's attempts only")
		}
	})
}
