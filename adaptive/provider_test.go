package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/seed93a044d1/retry"
)

// provider is an in-process service that serves at most capacity(second)
// attempts in each one-second window of time since start (windows begin at
// whole seconds) and answers the rest 429, with Retry-After set to the time
// until its window ends, rounded up to whole seconds, as the header carries
// it. An attempt is judged as it arrives and answered latency later.
// Throttled attempts do not count against the capacity.
type provider struct {
	start    time.Time
	capacity func(second int) int
	latency  time.Duration
	noDelay  bool // answer 429 without Retry-After

	mu      sync.Mutex
	second  int
	served  int
	windows []window // per 10s of time since start
}

// window counts the attempts of ten seconds.
type window struct {
	attempts, served, throttled int
}

const windowLen = 10 * time.Second

func newProvider(capacity func(second int) int, latency time.Duration) *provider {
	return &provider{start: time.Now(), capacity: capacity, latency: latency, second: -1}
}

// call is one attempt at the provider.
func (p *provider) call(ctx context.Context) error {
	err := p.judge(time.Now())
	select {
	case <-time.After(p.latency):
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

func (p *provider) judge(now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := now.Sub(p.start)
	if s := int(since / time.Second); s != p.second {
		p.second, p.served = s, 0
	}
	w := int(since / windowLen)
	for len(p.windows) <= w {
		p.windows = append(p.windows, window{})
	}
	p.windows[w].attempts++
	if p.served >= p.capacity(p.second) {
		p.windows[w].throttled++
		end := p.start.Add(time.Duration(p.second+1) * time.Second)
		ra := (end.Sub(now) + time.Second - 1).Truncate(time.Second)
		if p.noDelay {
			ra = 0
		}
		return &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: ra}
	}
	p.served++
	p.windows[w].served++
	return nil
}

// report returns the windows as a table, for failure messages and logs.
func (p *provider) report() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, w := range p.windows {
		fmt.Fprintf(&b, "%3ds-%3ds: %5d attempts, %5d served (%5.1f/s), %4d throttled (%4.1f%%)\n",
			i*10, i*10+10, w.attempts, w.served, float64(w.served)/windowLen.Seconds(),
			w.throttled, 100*float64(w.throttled)/max(1, float64(w.attempts)))
	}
	return b.String()
}

// callers runs n goroutines that call the provider through retry.Do with
// policy, one call after another, until the time is up, and waits for them.
// Each call has timeout (0: none but the end); a caller whose call found no
// time left (the limiter's queue reached past its deadline) pauses for a
// second before the next, as a client would that sheds the request.
//
// A policy without Rand gets, for each caller, a source of its own seeded
// with the caller's index, used by that caller's goroutine alone (so it
// needs no lock): the backoff draws are then the same on every run. The
// runs still differ, since goroutines that wake at one virtual instant run
// in the order the scheduler picks, and -race perturbs that order further.
func callers(n int, until, timeout time.Duration, p *provider, policy retry.Policy) {
	var wg sync.WaitGroup
	end := p.start.Add(until)
	for i := range n {
		policy := policy
		if policy.Rand == nil {
			policy.Rand = rand.New(rand.NewPCG(uint64(i), 0)).Float64
		}
		wg.Go(func() {
			for time.Now().Before(end) {
				deadline := end
				if timeout > 0 && time.Now().Add(timeout).Before(end) {
					deadline = time.Now().Add(timeout)
				}
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				err := retry.Do(ctx, p.call, policy)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					time.Sleep(time.Second)
				}
			}
		})
	}
	wg.Wait()
}
