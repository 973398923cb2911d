package benchmarks

import (
	"context"
	"testing"
	"time"

	retrygo "github.com/avast/retry-go/v4"
)

// libRetryGo is github.com/avast/retry-go/v4. Its fn takes no context, so
// each call wraps fn in a closure that carries ctx, and passes ctx as an
// option. Jitter is its FullJitterBackoffDelay; without jitter, BackOffDelay.
var libRetryGo = lib{
	name: "avast",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		delayType := retrygo.BackOffDelay
		if s.jitter {
			delayType = retrygo.FullJitterBackoffDelay
		}
		return func(ctx context.Context) error {
			return retrygo.Do(func() error { return fn(ctx) },
				retrygo.Context(ctx),
				retrygo.Attempts(attempts),
				retrygo.Delay(s.base),
				retrygo.MaxDelay(maxWait),
				retrygo.DelayType(delayType))
		}
	},
	delay: func(b *testing.B) {
		cfg := &retrygo.Config{}
		retrygo.Delay(100 * time.Millisecond)(cfg)
		retrygo.MaxDelay(maxWait)(cfg)
		b.ReportAllocs()
		n := uint(0)
		for b.Loop() {
			n = n%8 + 1
			sinkDuration = retrygo.FullJitterBackoffDelay(n, nil, cfg)
		}
	},
}
