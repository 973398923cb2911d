package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// libCenkalti is github.com/cenkalti/backoff/v5. Its ExponentialBackOff holds
// the current interval and is not safe for concurrent use, so each call makes
// its own; the options are built per call, as its examples do. Its only
// jitter is a randomization factor: the wait is drawn from +-50% of the
// interval.
var libCenkalti = lib{
	name: "cenkalti",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, fn(ctx) },
				backoff.WithBackOff(cenkaltiBackOff(s)),
				backoff.WithMaxTries(attempts))
			return err
		}
	},
	delay: func(b *testing.B) {
		bo := cenkaltiBackOff(schedule{base: 100 * time.Millisecond, jitter: true})
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			// Reset every 8 delays keeps the interval in the range ours
			// is measured on, instead of pinned at the cap.
			if n = n%8 + 1; n == 1 {
				bo.Reset()
			}
			sinkDuration = bo.NextBackOff()
		}
	},
}

func cenkaltiBackOff(s schedule) *backoff.ExponentialBackOff {
	bo := &backoff.ExponentialBackOff{
		InitialInterval: s.base,
		Multiplier:      2,
		MaxInterval:     maxWait,
	}
	if s.jitter {
		bo.RandomizationFactor = 0.5
	}
	return bo
}
