package benchmarks

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/seed93a044d1/retry"
)

// libRetry is this module's library. The Policy is a plain value built once
// and passed to every call, as its doc recommends.
var libRetry = lib{
	name: "retry",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		p := retryPolicy(s)
		return func(ctx context.Context) error { return retry.Do(ctx, fn, p) }
	},
	delay: func(b *testing.B) {
		e := retry.Exponential{} // 100ms doubling to 10s, full jitter
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = n%8 + 1
			sinkDuration = e.Delay(n, 0, draw)
		}
	},
}

// libRetryTimer is libRetry without jitter: both waits are 1ns, as every
// peer's are. With full jitter most of them round to 0. (A 1ns wait has
// passed by the time Do would start its timer, so it makes none.)
var libRetryTimer = lib{
	name: "retry-timer",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		s.jitter = false
		return libRetry.bind(s, fn)
	},
}

// libRetryRand is libRetry's Delay with u drawn from math/rand/v2 on each
// call, as Do draws it and as the peers draw theirs inside NextBackOff.
var libRetryRand = lib{
	name: "retry-rand",
	delay: func(b *testing.B) {
		e := retry.Exponential{}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = n%8 + 1
			sinkDuration = e.Delay(n, 0, rand.Float64())
		}
	},
}

func retryPolicy(s schedule) retry.Policy {
	jitter := retry.FullJitter
	if !s.jitter {
		jitter = retry.NoJitter
	}
	return retry.Policy{
		MaxAttempts: attempts,
		Backoff:     retry.Exponential{Base: s.base, Cap: maxWait, Jitter: jitter},
	}
}
