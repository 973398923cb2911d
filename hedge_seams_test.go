package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// A hedged call's winner keeps its context, as an attempt of a call that
// does not hedge keeps the caller's: only the losers are cut.
func TestHedgeWinnerContextLivesOn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var first context.Context
		won, err := retry.DoValue(t.Context(), func(ctx context.Context) (context.Context, error) {
			if retry.AttemptFrom(ctx) == 1 {
				first = ctx
				<-ctx.Done() // hangs until cut
				return nil, ctx.Err()
			}
			return ctx, nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		require.NoError(t, err)
		require.NotNil(t, won)
		assert.NoError(t, won.Err(), "the winner's context is not cut")
		assert.ErrorIs(t, first.Err(), context.Canceled, "the loser's is")
		select {
		case <-won.Done():
			t.Fatal("the winner's Done closed")
		default:
		}
	})
}

// The winner of a call whose first attempt answers before the hedge delay
// is the first attempt, on the caller's goroutine, and its context lives on.
func TestHedgeFirstAttemptWinsInline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		calls := 0 // no lock: every attempt runs on this goroutine
		won, err := retry.DoValue(t.Context(), func(ctx context.Context) (context.Context, error) {
			calls++
			time.Sleep(5 * time.Millisecond)
			return ctx, nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		require.NoError(t, err)
		assert.Equal(t, 1, calls)
		assert.NoError(t, won.Err())
		assert.Equal(t, 1, retry.AttemptFrom(won))
	})
}

// A response a hedged winner returned can be read after DoValue returns,
// over a real loopback connection.
func TestHedgeWinnerBodyReadable(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 20000)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			<-r.Context().Done() // the first request hangs until it is cut
			return
		}
		io.WriteString(w, body)
	}))
	defer srv.Close()
	client := srv.Client()
	resp, err := retry.DoValue(t.Context(), func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return nil, err
		}
		return client.Do(req)
	}, retry.Policy{HedgeDelay: retry.Constant(20 * time.Millisecond)})
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the winner's body outlives the call")
	assert.Len(t, got, len(body))
}

// slowLimiter answers its first booking at once and every later one after
// delay, as a shared limiter whose local batch is spent does.
type slowLimiter struct {
	delay    time.Duration
	reserves atomic.Int32
	cancels  atomic.Int32
}

func (l *slowLimiter) Reserve(ctx context.Context, t time.Time) (retry.Reservation, error) {
	if l.reserves.Add(1) > 1 {
		select {
		case <-time.After(l.delay):
		case <-ctx.Done():
			return retry.Reservation{}, ctx.Err()
		}
	}
	return retry.Reservation{Start: time.Now()}, nil
}

func (l *slowLimiter) Cancel(retry.Reservation) { l.cancels.Add(1) }

// A booking that is slow to come back does not hold up a call that has
// won: the call returns when its attempt succeeds, no hedge starts, and the
// booking no longer needed is given back or abandoned.
func TestHedgeSlowBookingDoesNotHoldTheWinner(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &slowLimiter{delay: 50 * time.Millisecond}
		var calls atomic.Int32
		start := time.Now()
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			calls.Add(1)
			time.Sleep(15 * time.Millisecond)
			return nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Limiter: lim})
		require.NoError(t, err)
		assert.Equal(t, 15*time.Millisecond, time.Since(start), "returns as its attempt succeeds")
		time.Sleep(time.Second)
		assert.Equal(t, int32(1), calls.Load(), "no hedge after the call has won")
		assert.Equal(t, int32(2), lim.reserves.Load(), "the first attempt's booking and the hedge's")
	})
}

// A slow booking of a hedge that is still wanted starts the hedge once it
// comes back, while the attempts in flight go on.
func TestHedgeSlowBookingStillHedges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &slowLimiter{delay: 50 * time.Millisecond}
		var mu sync.Mutex
		var starts []time.Duration
		start := time.Now()
		n, err := retry.DoValue(t.Context(), func(ctx context.Context) (int, error) {
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			if retry.AttemptFrom(ctx) == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 2, nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Limiter: lim})
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		assert.Equal(t, []time.Duration{0, 60 * time.Millisecond}, starts, "the hedge starts as its booking comes back")
	})
}

// Work declared Sequential (a transaction) or Once is never hedged: never
// in flight twice, whatever the Policy's Hedge.
func TestHedgeNeverRunsSequentialWorkTwice(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		opt   retry.Option
		calls int
	}{
		{"Sequential", retry.Sequential, 3},
		{"Once", retry.Once, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var inFlight, most, calls atomic.Int32
				err := retry.Do(t.Context(), func(ctx context.Context) error {
					calls.Add(1)
					if n := inFlight.Add(1); n > most.Load() {
						most.Store(n)
					}
					defer inFlight.Add(-1)
					time.Sleep(100 * time.Millisecond)
					return errFlaky
				}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), HedgeDelay: retry.Constant(time.Millisecond)}, tt.opt)
				require.Error(t, err)
				assert.Equal(t, int32(1), most.Load(), "attempts in flight at once")
				assert.Equal(t, int32(tt.calls), calls.Load())
				if tt.opt == retry.Once {
					assert.ErrorIs(t, err, retry.ErrNotIdempotent)
					assert.ErrorIs(t, err, errFlaky)
				}
			})
		})
	}
}

// closer records whether it was closed.
type closer struct{ closed atomic.Bool }

func (c *closer) Close() error { c.closed.Store(true); return nil }

// A loser that succeeded too has its value released: an io.Closer is
// closed; the winner's is not.
func TestHedgeLoserValueClosed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		vals := [3]*closer{{}, {}, {}}
		won, err := retry.DoValue(t.Context(), func(ctx context.Context) (*closer, error) {
			n := retry.AttemptFrom(ctx)
			if n == 1 {
				time.Sleep(30 * time.Millisecond) // succeeds too, after the hedge has won
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			return vals[n], nil
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		require.NoError(t, err)
		assert.Same(t, vals[2], won)
		assert.False(t, won.closed.Load(), "the winner's value is the caller's")
		assert.True(t, vals[1].closed.Load(), "the loser's value is released")
	})
}

// A fatal answer of a hedge ends the call with that answer, and the cut
// loser's end, which follows it, does not replace it.
func TestHedgeFatalAnswerKept(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		errNotFound := retry.Permanent(errors.New("not found"))
		var events []retry.Event
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			if retry.AttemptFrom(ctx) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return errNotFound
		}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Observe: func(_ context.Context, e retry.Event) {
			events = append(events, e)
		}})
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, re.Reason, retry.ErrNotRetryable)
		assert.EqualError(t, re.Last, "not found", "the fatal answer is the call's last error")
		require.Len(t, events, 3)
		assert.Equal(t, 2, events[0].Attempt)
		assert.Equal(t, 1, events[1].Attempt)
		assert.ErrorIs(t, events[1].Err, context.Canceled)
		assert.True(t, events[2].Done)
	})
}

// HedgeWon tells Observe, with the Done event, that a hedge won the call;
// the events themselves stay as they are.
func TestHedgeWonSeenByObserve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, hedgeWins := range []bool{true, false} {
			var won, others bool
			err := retry.Do(t.Context(), func(ctx context.Context) error {
				if slow := retry.AttemptFrom(ctx) == 1; slow == hedgeWins {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(50 * time.Millisecond):
					}
				}
				return nil
			}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond), Observe: func(ctx context.Context, e retry.Event) {
				if e.Done {
					won = retry.HedgeWon(ctx)
				} else {
					others = others || retry.HedgeWon(ctx)
				}
			}})
			require.NoError(t, err)
			assert.Equal(t, hedgeWins, won, "HedgeWon on Done when the hedge wins: %v", hedgeWins)
			assert.False(t, others, "HedgeWon on an attempt's event")
		}
		assert.False(t, retry.HedgeWon(t.Context()))
	})
}

// A panic in the attempt on the caller's goroutine, with a hedge in flight
// beside it, cuts the hedge and goes on up once the hedge has returned; with
// no hedge due, it goes on up at once and leaves no timer behind.
func TestHedgeInlinePanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var hedgeCut atomic.Bool
		assert.PanicsWithValue(t, "boom", func() {
			_ = retry.Do(t.Context(), func(ctx context.Context) error {
				if retry.AttemptFrom(ctx) == 2 {
					<-ctx.Done()
					hedgeCut.Store(true)
					return ctx.Err()
				}
				time.Sleep(20 * time.Millisecond) // the hedge starts at 10ms
				panic("boom")
			}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		})
		assert.True(t, hedgeCut.Load(), "the hedge was cut and had returned")

		calls := 0
		assert.PanicsWithValue(t, "early", func() {
			_ = retry.Do(t.Context(), func(ctx context.Context) error {
				calls++
				panic("early")
			}, retry.Policy{HedgeDelay: retry.Constant(10 * time.Millisecond)})
		})
		time.Sleep(time.Second)
		assert.Equal(t, 1, calls, "no hedge starts after the panic")
	})
}
