package adaptive_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/retryhttp"
)

// Once for real: a loopback HTTP server that serves 50 requests in each
// second of the wall clock and answers 429 with Retry-After: 1 above that,
// 40 goroutines calling it through retryhttp with one Limiter and no
// configured rate. After a 3s warm-up, the next 6s must be served near the
// capacity and not throttled much; the bounds are generous, because the
// machine is shared and its timers late.
func TestLimiterAgainstLoopbackHTTP(t *testing.T) {
	t.Parallel()
	const capacity = 50
	var (
		mu      sync.Mutex
		second  int64 = -1
		served  int
		counts  = map[int64][2]int{} // per second of the run: served, throttled
		started = time.Now()
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := int64(time.Since(started) / time.Second)
		if s != second {
			second, served = s, 0
		}
		c := counts[s]
		ok := served < capacity
		if ok {
			served++
			c[0]++
		} else {
			c[1]++
		}
		counts[s] = c
		mu.Unlock()
		if !ok {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	lim := &adaptive.Limiter{}
	client := retryhttp.NewClient(nil, retry.Policy{Limiter: lim, MaxAttempts: 4, MinAttemptTime: 50 * time.Millisecond})
	t.Cleanup(client.CloseIdleConnections)
	const (
		warmUp = 3 * time.Second
		run    = 9 * time.Second
	)
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for time.Since(started) < run {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				} else {
					time.Sleep(100 * time.Millisecond) // a caller that sheds the request
				}
				cancel()
			}
		})
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var ok, throttled int
	from, to := int64(warmUp/time.Second), int64(run/time.Second)
	for s := from; s < to; s++ {
		ok += counts[s][0]
		throttled += counts[s][1]
		t.Logf("second %d: %d served, %d throttled", s, counts[s][0], counts[s][1])
	}
	seconds := float64(to - from)
	assert.Positive(t, lim.Rate(), "the Limiter learned the throttles")
	assert.GreaterOrEqual(t, float64(ok)/seconds, 0.4*capacity, "served per second")
	assert.LessOrEqual(t, float64(ok+throttled)/seconds, 1.5*capacity, "sent per second")
	assert.Less(t, float64(throttled), 0.2*float64(ok+throttled), "throttled")
}
