package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

var errThrottled = &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests"}

// The success path: a booking and its success, from every CPU at once, on a
// Limiter that has learned no throttle (it books at once) and on one that
// paces (its bookings queue: a booking costs the same however long the
// queue, which the book keeps in a few words).
func BenchmarkLimiterReserveLearn(b *testing.B) {
	for _, tt := range []struct {
		name    string
		limited bool
	}{{"unlimited", false}, {"pacing", true}} {
		b.Run(tt.name, func(b *testing.B) {
			lim := &adaptive.Limiter{}
			if tt.limited {
				// A throttle at a measured rate of ~1e9/s: the pace is then
				// far above what a benchmark books.
				now := time.Now()
				for range 1000 {
					lim.ReserveAt(now, now)
					lim.LearnAt(now, 0, nil)
				}
				lim.LearnAt(now.Add(time.Microsecond), 0, errThrottled)
				if lim.Rate() == 0 {
					b.Fatal("the Limiter learned no throttle")
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, _ := lim.Reserve(ctx, time.Time{})
					_ = r
					lim.Learn(time.Millisecond, nil)
				}
			})
		})
	}
}

// The hedge's two calls, from every CPU at once, once it has seen enough
// successes to place its quantile.
func BenchmarkHedge(b *testing.B) {
	h := &adaptive.Hedge{Floor: time.Millisecond}
	for i := range 2000 {
		h.Learn(time.Duration(1+i%20)*time.Millisecond, nil)
	}
	b.Run("Delay", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = h.Delay(1, 0, 0)
			}
		})
	})
	b.Run("Learn", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			d := time.Millisecond
			for pb.Next() {
				h.Learn(d, nil)
				d = d%(20*time.Millisecond) + time.Millisecond
			}
		})
	})
	b.Run("DelayLearn", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			d := time.Millisecond
			for pb.Next() {
				_ = h.Delay(1, 0, 0)
				h.Learn(d, nil)
				d = d%(20*time.Millisecond) + time.Millisecond
			}
		})
	})
}

// A slot taken and given back with a success, when one is free: on one
// goroutine (no allocation: the release is made once per slot and given out
// again with it), and from every CPU at once against a limit that they
// never reach.
func BenchmarkConcurrencyAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		slots := &adaptive.Concurrency{}
		b.ReportAllocs()
		for b.Loop() {
			release, err := slots.Acquire(ctx, time.Time{})
			if err != nil {
				b.Fatal(err)
			}
			release(time.Millisecond, nil)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		slots := &adaptive.Concurrency{InitialLimit: 1000}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				release, err := slots.Acquire(ctx, time.Time{})
				if err != nil {
					b.Error(err)
					return
				}
				release(time.Millisecond, nil)
			}
		})
	})
}
