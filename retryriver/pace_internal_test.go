package retryriver

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// An attempt waits for its limiter token on a timer.
func TestPaceWaitsForToken(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := New(retry.Policy{Limiter: rate.NewLimiter(10, 1)})
		start := time.Now()
		assert.NoError(t, m.pace(t.Context(), time.Time{}, start))
		assert.NoError(t, m.pace(t.Context(), time.Time{}, time.Now()))
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the second token comes 100 ms after the first")
	})
}

// Waiters whose tokens all came due while the process was stalled do not go
// out at once: those woken later than the burst takes to refill reserve
// again, and are spaced anew.
func TestPaceSpacesAttemptsWokenLate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := New(retry.Policy{Limiter: rate.NewLimiter(100, 1)}) // a token every 10 ms; the burst refills in 10 ms
		start := time.Now()
		var mu sync.Mutex
		stalled := 0
		m.woke = func() {
			mu.Lock()
			first := stalled < 2
			stalled++
			mu.Unlock()
			if first { // the process stalls until 1 s: both waiters wake late
				time.Sleep(time.Until(start.Add(time.Second)))
			}
		}
		// Three attempts reserve tokens for 0, 10 and 20 ms.
		done := make(chan time.Duration, 3)
		for range 3 {
			go func() {
				_ = m.pace(t.Context(), time.Time{}, start)
				done <- time.Since(start)
			}()
		}
		var got []time.Duration
		for range 3 {
			got = append(got, <-done)
		}
		assert.ElementsMatch(t, []time.Duration{0, time.Second, time.Second + 10*time.Millisecond}, got,
			"the two waiters that woke late at 1 s went out 10 ms apart, not together")
	})
}

func TestPaceStopsWhenTokenComesTooLate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := New(retry.Policy{Limiter: rate.NewLimiter(1, 1)})
		now := time.Now()
		assert.NoError(t, m.pace(context.Background(), now.Add(time.Hour), now))
		assert.ErrorIs(t, m.pace(context.Background(), now.Add(500*time.Millisecond), now), retry.ErrNoTimeLeft,
			"the next token is a second away, the deadline half a second")
		assert.NoError(t, m.pace(context.Background(), time.Time{}, time.Now()), "the refused reservation was given back")
		assert.ErrorIs(t, New(retry.Policy{Limiter: rate.NewLimiter(1, 0)}).pace(context.Background(), time.Time{}, now), errLimiterBurst)
	})
}
