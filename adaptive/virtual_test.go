package adaptive_test

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// The Limiter driven as a discrete-event simulation drives it: on one
// goroutine, in virtual time, through ReserveAt and LearnAt, with
// retry.Next deciding each retry and the Budget asked as the loop asks it.
// Workers call a provider of 300 requests a second (600 from 60s on) in a
// closed loop; the run is exact, so its figures are the same on every
// machine.
func TestLimiterInVirtualTime(t *testing.T) {
	t.Parallel()
	const (
		workers  = 500
		capacity = 300
		latency  = 20 * time.Millisecond
		end      = 120 * time.Second
	)
	lim := &adaptive.Limiter{}
	policy := retry.Policy{MaxAttempts: 5, Budget: retry.NewBudget(0.1, 1)}
	rng := rand.New(rand.NewPCG(1, 2))

	var q events
	type job struct {
		attempt int
		prev    time.Duration
		sent    time.Duration
	}
	jobs := make([]job, workers)
	book := func(w int, now, planned time.Duration) {
		r := lim.ReserveAt(at(now), at(planned))
		heap.Push(&q, event{at: max(planned, r.Start.Sub(t0)), worker: w, kind: send})
	}
	for w := range workers {
		jobs[w] = job{attempt: 1}
		policy.Budget.Deposit(at(0))
		book(w, 0, 0)
	}
	var windows [end / windowLen]window
	second, servedInSecond := time.Duration(-1), 0
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		now, w := ev.at, ev.worker
		if now >= end {
			continue
		}
		win := &windows[now/windowLen]
		switch ev.kind {
		case send:
			// The provider judges the attempt as it arrives.
			if s := now.Truncate(time.Second); s != second {
				second, servedInSecond = s, 0
			}
			c := capacity
			if now >= 60*time.Second {
				c = 2 * capacity
			}
			win.attempts++
			jobs[w].sent = now
			var err error
			if servedInSecond >= c {
				win.throttled++
				err = &retry.ResponseError{StatusCode: 429, RetryAfter: second + time.Second - now}
			} else {
				servedInSecond++
				win.served++
			}
			heap.Push(&q, event{at: now + latency, worker: w, kind: answer, err: err})
		case answer:
			lim.LearnAt(at(now), now-jobs[w].sent, ev.err)
			j := &jobs[w]
			if ev.err != nil {
				wait, stop := retry.Next(policy, j.attempt, j.prev, ev.err, at(now), time.Time{}, rng.Float64())
				if stop == nil && policy.Budget.Withdraw(at(now)) {
					j.attempt++
					j.prev = wait
					book(w, now, now+wait)
					continue
				}
			}
			// Done, delivered or given up: the worker's next job.
			*j = job{attempt: 1}
			policy.Budget.Deposit(at(now))
			book(w, now, now)
		}
	}
	for i, w := range windows {
		from := time.Duration(i) * windowLen
		c := float64(capacity)
		switch {
		case from >= 20*time.Second && from < 60*time.Second:
		case from >= 80*time.Second:
			c *= 2
		default:
			continue
		}
		t.Logf("%3v: %5d attempts, %.2fC served, %.1f%% throttled", from, w.attempts,
			float64(w.served)/10/c, 100*float64(w.throttled)/float64(w.attempts))
		assert.GreaterOrEqual(t, float64(w.served)/10, 0.6*c, "served from %v", from)
		assert.LessOrEqual(t, float64(w.attempts)/10, 1.3*c, "sent from %v", from)
		assert.Less(t, float64(w.throttled), 0.1*float64(w.attempts), "throttled from %v", from)
	}
}

const (
	send uint8 = iota
	answer
)

type event struct {
	at     time.Duration
	worker int
	kind   uint8
	err    error
}

// events is a min-heap of events by time, then by worker, so that a run is
// exact.
type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].worker < q[j].worker
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
