package main

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// The same drill in virtual time, from the core's own decisions: each job's
// retries come from retry.Next, the limiter is a rate.Limiter driven with
// virtual times, and the provider follows the same rules as the real one.
// Jobs are taken in the order River takes them (due time, then ID), each
// reserves a limiter token when it comes due and starts when the token
// allows, so the limiter is a FIFO queue. Worker slots are not modelled:
// there are always enough. It plays the part of cmd/retrysim's drill, which
// lives in the root module's internal/ and cannot be imported from here.

// modelResult is what the virtual-time drill measured.
type modelResult struct {
	delivered, dead, attempts, duplicates, unknownJobs, peak, peakClock int
	drain                                                               time.Duration
}

type due struct {
	at time.Duration
	id int
}

type dueHeap []due

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func model(p params, seed uint64) modelResult {
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	pol := p.policy()
	lim := rate.NewLimiter(rate.Limit(p.limit), p.burst) // driven in virtual time, as the policy's would be in real time
	rng := rand.New(rand.NewPCG(seed, seed+1))
	type job struct {
		attempts int
		prev     time.Duration
		unknown  bool
	}
	jobs := make([]job, p.jobs)
	h := make(dueHeap, p.jobs)
	for i := range h {
		h[i] = due{id: i}
	}
	heap.Init(&h)
	served := map[int64]int{}
	sent := make([]bool, p.jobs)
	var arrivals []time.Duration
	var r modelResult
	for h.Len() > 0 {
		d := heap.Pop(&h).(due)
		j := &jobs[d.id]
		res := lim.ReserveN(epoch.Add(d.at), 1)
		at := d.at + res.DelayFrom(epoch.Add(d.at))
		arrivals = append(arrivals, at)
		j.attempts++
		end := at
		var err error
		switch {
		case len(arrivals) <= p.outage: // arrivals are in time order: see below
			err, end = context.DeadlineExceeded, at+p.attemptTimeout
			j.unknown = true
		default:
			w := int64(at / p.window)
			if served[w] >= p.capacity {
				left := p.window*time.Duration(w+1) - at
				err = &retry.ResponseError{StatusCode: 429, RetryAfter: (left + time.Millisecond - 1).Truncate(time.Millisecond)}
				break
			}
			served[w]++
			if sent[d.id] {
				r.duplicates++
			}
			sent[d.id] = true
			if rng.Float64() < p.lostReplies {
				err, end = context.DeadlineExceeded, at+p.attemptTimeout
				j.unknown = true
			}
		}
		r.drain = max(r.drain, end)
		if err == nil {
			r.delivered++
			continue
		}
		wait, stop := retry.Next(pol, j.attempts, j.prev, err, epoch.Add(end), time.Time{}, rng.Float64())
		if stop != nil {
			r.dead++
			continue
		}
		j.prev = wait
		heap.Push(&h, due{at: end + wait, id: d.id})
	}
	for _, j := range jobs {
		r.attempts += j.attempts
		if j.unknown {
			r.unknownJobs++
		}
	}
	r.peak = peakPerSecond(arrivals) // arrivals are in order: the limiter hands out tokens in time order
	r.peakClock = peakPerClockSecond(arrivals)
	return r
}
