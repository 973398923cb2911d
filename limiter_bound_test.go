package retry_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// mostInWindow returns the most of the sorted times that fall in any
// window [t, t+w).
func mostInWindow(times []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// A shared limiter bounds every attempt, retries included, whatever their
// schedule: calls whose first attempts fail together as an outage ends and
// that all wait the same time before retrying (a constant backoff, a
// server's Retry-After, equal jitter) start no more attempts in any window
// than the rate allows in it plus the burst.
func TestLimiterBoundsSynchronizedRetries(t *testing.T) {
	t.Parallel()
	const (
		calls = 30
		limit = 20 // per second
		burst = 2
	)
	schedules := []struct {
		name   string
		policy retry.Policy
		err    func(n int) error // the error every attempt before the last returns
	}{
		{"constant 1s", retry.Policy{Backoff: retry.Constant(time.Second)}, nil},
		{"constant 300ms", retry.Policy{Backoff: retry.Constant(300 * time.Millisecond)}, nil},
		{"constant 0", retry.Policy{Backoff: retry.Constant(0)}, nil},
		{"equal jitter", retry.Policy{Backoff: retry.Exponential{Base: time.Second, Jitter: retry.EqualJitter}}, nil},
		{"Retry-After 2s", retry.Policy{Backoff: retry.Constant(0)}, func(int) error { return retry.RetryAfter(errFlaky, 2*time.Second) }},
		{"Retry-After, three failures", retry.Policy{Backoff: retry.Constant(0), MaxAttempts: 5}, func(n int) error {
			return retry.RetryAfter(errFlaky, time.Duration(n)*500*time.Millisecond)
		}},
	}
	for _, sc := range schedules {
		for _, failures := range []int{1, 3} {
			name := fmt.Sprintf("%s, %d failures", sc.name, failures)
			synctest.Test(t, func(t *testing.T) {
				lim := retry.RateLimiter(rate.NewLimiter(limit, burst))
				var mu sync.Mutex
				var starts []time.Time
				outage := make(chan struct{})
				p := sc.policy
				p.Limiter = lim
				if p.MaxAttempts == 0 {
					p.MaxAttempts = failures + 1
				}
				src := rand.New(rand.NewPCG(1, 2))
				var srcMu sync.Mutex
				p.Rand = func() float64 { srcMu.Lock(); defer srcMu.Unlock(); return src.Float64() }
				var wg sync.WaitGroup
				for range calls {
					wg.Go(func() {
						n := 0
						err := retry.Do(context.Background(), func(context.Context) error {
							mu.Lock()
							starts = append(starts, time.Now())
							mu.Unlock()
							n++
							if n == 1 {
								<-outage // every first attempt fails as the outage ends
							}
							if n <= failures {
								if sc.err != nil {
									return sc.err(n)
								}
								return errFlaky
							}
							return nil
						}, p)
						assert.NoError(t, err, name)
					})
				}
				time.Sleep(5 * time.Second) // the first attempts start, paced, and hang
				close(outage)
				wg.Wait()
				slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
				assert.Len(t, starts, calls*(failures+1), name)
				for _, w := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second} {
					bound := int(limit*w.Seconds()) + burst
					assert.LessOrEqual(t, mostInWindow(starts, w), bound, "%s: attempts in a window of %v", name, w)
				}
			})
		}
	}
}
