package main

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// params are the drill's numbers at one scale. At scale 1 they are the
// seed's: 10,000 notifications, a provider down for its first 2,000
// requests (10 s of the limiter's 200/s) and then serving 300 requests per
// second, a policy of 5 attempts with Exponential{500ms, 30s} full jitter,
// a 2 s attempt timeout and a 200/s limiter for every attempt. The
// limiter's burst is 10: a token bucket lets rate + burst attempts through
// in a second, and attempts reach the provider a few milliseconds after
// their token, so with the design notes' burst of 20 the peak would sit at
// or just above 10% over the rate; with 10 it stays within.
//
// The outage is a number of requests, not a span of time, so that the same
// attempts meet it however fast or slow the machine runs them: on a loaded
// machine a 0.3 s window could pass before any attempt reached the
// provider.
//
// A scale s below 1 makes the same drill s times as long: s times the jobs,
// the outage's requests and every duration (backoff, attempt timeout), at
// the same rates (limiter, capacity), so every ratio that shapes the drill
// stays: the share of jobs that meet the outage, the backoff against the
// drain, the attempts per second. The throttle window stays 1 s, as rates
// do. The attempt timeout is never below 1 s: a loopback reply on a loaded
// machine (the race detector, a busy CI) can take longer than a tenth of
// 2 s, and a timeout that fires on a healthy provider is not the drill's
// subject.
type params struct {
	scale          float64
	jobs           int
	outage         int           // the provider's first requests, which it never answers
	capacity       int           // requests served per window once the provider is up
	window         time.Duration // the provider's throttle window
	lostReplies    float64       // share of served requests whose reply is lost
	maxAttempts    int
	base, cap      time.Duration
	attemptTimeout time.Duration
	limit          float64 // attempts per second, retries included
	burst          int
}

func paramsFor(scale float64) (params, error) {
	if !(scale > 0 && scale <= 1) || math.IsNaN(scale) {
		return params{}, fmt.Errorf("outage: -scale must be in (0, 1], not %v", scale)
	}
	d := func(full time.Duration) time.Duration { return time.Duration(float64(full) * scale) }
	n := func(full int) int { return max(1, int(math.Round(float64(full)*scale))) }
	return params{
		scale:          scale,
		jobs:           n(10_000),
		outage:         n(2_000),
		capacity:       300,
		window:         time.Second,
		lostReplies:    0.01,
		maxAttempts:    5,
		base:           d(500 * time.Millisecond),
		cap:            d(30 * time.Second),
		attemptTimeout: max(d(2*time.Second), time.Second),
		limit:          200,
		burst:          10,
	}, nil
}

// policy returns the drill's retry.Policy, with a fresh limiter.
func (p params) policy() retry.Policy {
	return retry.Policy{
		MaxAttempts:    p.maxAttempts,
		Backoff:        retry.Exponential{Base: p.base, Cap: p.cap},
		Limiter:        retry.RateLimiter(rate.NewLimiter(rate.Limit(p.limit), p.burst)),
		AttemptTimeout: p.attemptTimeout,
	}
}
