package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/breaker"
)

// gobreaker reads time.Now, which is the bubble's fake clock: every time
// below is exact.

func tripAfter(n uint32) func(gobreaker.Counts) bool {
	return func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n }
}

// Once open, Allow refuses until the end of Timeout, and Until says so
// without taking anything; then one trial request goes through, a second
// is refused for a second, and the trial's success closes the breaker.
func TestBreakerOpenHalfOpenClosed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		b := breaker.New(gobreaker.Settings{
			Timeout: 10 * time.Second, ReadyToTrip: tripAfter(2),
			OnStateChange: func(_ string, from, to gobreaker.State) { changes = append(changes, from.String()+"->"+to.String()) },
		})
		for range 2 {
			done, until := b.Allow(time.Now())
			require.NotNil(t, done)
			assert.True(t, until.IsZero())
			done(time.Now(), syscall.ECONNRESET)
		}
		halfOpen := time.Now().Add(10*time.Second + time.Nanosecond) // gobreaker waits until past Timeout
		require.Equal(t, gobreaker.StateOpen, b.State())

		time.Sleep(4 * time.Second)
		done, until := b.Allow(time.Now())
		assert.Nil(t, done)
		assert.True(t, until.Equal(halfOpen), "Allow: until %v, want %v", until, halfOpen)
		assert.True(t, b.Until(time.Now()).Equal(until), "Until = %v, want %v", b.Until(time.Now()), until)
		assert.True(t, b.Until(until).IsZero(), "nothing to wait for from the end of Timeout")

		time.Sleep(time.Until(until))
		probe, until := b.Allow(time.Now())
		require.NotNil(t, probe, "half-open: a trial request goes through")
		assert.True(t, until.IsZero())
		assert.True(t, b.Until(time.Now()).IsZero(), "half-open: nothing to wait for")
		second, until := b.Allow(time.Now())
		assert.Nil(t, second, "one trial request at a time (MaxRequests 0 means 1)")
		assert.True(t, until.Equal(time.Now().Add(time.Second)), "until %v", until)

		probe(time.Now(), nil)
		assert.Equal(t, gobreaker.StateClosed, b.State())
		assert.Equal(t, []string{"closed->open", "open->half-open", "half-open->closed"}, changes,
			"the caller's OnStateChange is still called")
	})
}

// An end that says nothing of the dependency (it Is context.Canceled) is
// excluded: it neither opens the breaker nor closes a half-open one, and a
// trial request that ends so frees its place for another. The caller's
// IsExcluded is still asked.
func TestBreakerNoNewsIsExcluded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		errMine := errors.New("excluded by the caller")
		b := breaker.New(gobreaker.Settings{
			Timeout: time.Second, ReadyToTrip: tripAfter(2),
			IsExcluded: func(err error) bool { return errors.Is(err, errMine) },
		})
		noNews := fmt.Errorf("a 404: %w", context.Canceled)
		for _, err := range []error{noNews, noNews, errMine, errMine} {
			done, _ := b.Allow(time.Now())
			require.NotNil(t, done)
			done(time.Now(), err)
		}
		assert.Equal(t, gobreaker.StateClosed, b.State())
		assert.Equal(t, uint32(4), b.Counts().TotalExclusions)
		assert.Zero(t, b.Counts().TotalFailures)

		for range 2 {
			done, _ := b.Allow(time.Now())
			done(time.Now(), syscall.ECONNRESET)
		}
		require.Equal(t, gobreaker.StateOpen, b.State())
		time.Sleep(time.Until(b.Until(time.Now())))
		probe, _ := b.Allow(time.Now())
		require.NotNil(t, probe)
		probe(time.Now(), noNews)
		assert.Equal(t, gobreaker.StateHalfOpen, b.State(), "no news does not close it")
		next, _ := b.Allow(time.Now())
		assert.NotNil(t, next, "the trial that said nothing freed its place")
	})
}

// Through retry.Do: the loop's "no news" for an error its classifier stops
// on counts for nothing, retryable failures open the breaker within a call,
// which stops with ErrBreakerOpen and the breaker's Until, and the next
// call makes no attempt.
func TestBreakerInTheLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New(gobreaker.Settings{Timeout: time.Minute, ReadyToTrip: tripAfter(3)})
		p := retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(time.Second), Breaker: b}
		attempts := 0
		for range 5 {
			err := retry.Do(t.Context(), func(context.Context) error {
				attempts++
				return retry.Permanent(errors.New("not found"))
			}, p)
			require.Error(t, err)
		}
		assert.Equal(t, 5, attempts)
		assert.Equal(t, gobreaker.StateClosed, b.State(), "errors the classifier stops on count for nothing")

		attempts = 0
		start := time.Now()
		err := retry.Do(t.Context(), func(context.Context) error { attempts++; return syscall.ECONNRESET }, p)
		assert.Equal(t, 3, attempts, "the third failure opened it")
		assert.Equal(t, 2*time.Second, time.Since(start), "two waits, then a stop at once: the retry would be refused")
		var re *retry.Error
		require.True(t, errors.As(err, &re))
		assert.ErrorIs(t, re.Reason, retry.ErrBreakerOpen)
		assert.ErrorIs(t, re.Last, syscall.ECONNRESET, "the last attempt's error is kept")
		var open interface{ Until() time.Time }
		require.True(t, errors.As(re.Reason, &open))
		assert.True(t, open.Until().Equal(time.Now().Add(time.Minute+time.Nanosecond)), "Until %v", open.Until())

		err = retry.Do(t.Context(), func(context.Context) error { attempts++; return nil }, p)
		assert.ErrorIs(t, err, retry.ErrBreakerOpen)
		assert.Equal(t, 3, attempts, "no attempt while open")
	})
}
