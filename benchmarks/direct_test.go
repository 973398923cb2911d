package benchmarks

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// libDirect is the floor: no library, but the least any retry loop must do.
// It checks ctx, reads the clock once (for the elapsed time a failure
// reports) and calls fn; after a failure it waits on one timer, made on the
// first real wait and interrupted by ctx. It has no classifier, no deadline
// check and no error type of its own.
var libDirect = lib{
	name: "direct",
	bind: func(s schedule, fn func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error { return directLoop(ctx, s, fn) }
	},
	delay: func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = n%8 + 1
			c := min(100*time.Millisecond<<(n-1), maxWait)
			sinkDuration = time.Duration(draw * float64(c))
		}
	},
}

func directLoop(ctx context.Context, s schedule, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	var timer *time.Timer
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if n == attempts {
			return &gaveUp{elapsed: time.Since(start), last: err}
		}
		wait := min(s.base<<(n-1), maxWait)
		if s.jitter {
			wait = time.Duration(rand.Float64() * float64(wait))
		}
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return &gaveUp{elapsed: time.Since(start), last: err}
			}
		}
		if ctx.Err() != nil {
			return &gaveUp{elapsed: time.Since(start), last: err}
		}
	}
}

// gaveUp is the floor's error: the last error and the time spent.
type gaveUp struct {
	elapsed time.Duration
	last    error
}

func (e *gaveUp) Error() string { return "gave up after " + e.elapsed.String() + ": " + e.last.Error() }
func (e *gaveUp) Unwrap() error { return e.last }

// BenchmarkTimeNow is one clock read: the part of the floor that the elapsed
// time in an error costs.
func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkTime = time.Now()
	}
}
