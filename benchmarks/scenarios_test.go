package benchmarks

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// Every library is configured alike, as far as its API allows: at most 5
// attempts in all, exponential backoff doubling from the schedule's base up to
// 10s, with jitter where the schedule asks for it and the library offers it.
const (
	attempts = 5
	maxWait  = 10 * time.Second
)

// errFlaky is the operation's own error. The scenarios that stop early check
// whether the error a library returns still carries it (errors.Is).
var errFlaky = errors.New("flaky: try again")

// A schedule is the backoff every library is configured with for a scenario.
type schedule struct {
	base   time.Duration // the first wait; each later one doubles, up to maxWait
	jitter bool          // randomise each wait, in the way the library offers
}

var (
	// oneNanosecond is the smallest wait every library accepts.
	oneNanosecond = schedule{base: time.Nanosecond, jitter: true}
	// oneSecond is a wait long enough to be cancelled in the middle.
	oneSecond = schedule{base: time.Second}
	// fortyMillis waits 40ms, then 80ms: under a 50ms deadline the first
	// wait fits and the second cannot.
	fortyMillis = schedule{base: 40 * time.Millisecond}
)

// A lib is one retry library behind the same two hooks, so that every
// scenario runs the same code for each.
type lib struct {
	name string

	// bind returns a call that runs fn under the library's retry loop
	// configured with s. What a user can build once (an immutable policy, fn
	// adapted to the library's signature) is built in bind; what the library
	// needs anew for each call (a stateful backoff, per-call options, a
	// closure that carries ctx to an fn that takes none) is built inside the
	// call, so that it is measured.
	bind func(s schedule, fn func(context.Context) error) func(context.Context) error

	// delay measures computing one next delay, with b.Loop; nil if the
	// library has no way to compute a delay on its own.
	delay func(b *testing.B)
}

var (
	// libs are the floor, ours and the peers: every scenario runs them.
	libs = []lib{libDirect, libRetry, libCenkalti, libRetryGo, libGoRetry, libFailsafe}
	// withTimer adds ours without jitter, whose 1ns waits are real waits on
	// the call's timer (with full jitter most of them round to 0).
	withTimer = []lib{libDirect, libRetry, libRetryTimer, libCenkalti, libRetryGo, libGoRetry, libFailsafe}
	// withRand adds ours drawing its own u, as the peers do inside.
	withRand = []lib{libDirect, libRetry, libRetryRand, libCenkalti, libRetryGo, libGoRetry, libFailsafe}
	// noFloor are the libraries alone, for the deadline scenario: the floor
	// has no policy to compare.
	noFloor = []lib{libRetry, libCenkalti, libRetryGo, libGoRetry, libFailsafe}
)

// Sinks keep results alive, so that the compiler cannot drop the work.
var (
	sinkDuration time.Duration
	sinkTime     time.Time
	// draw is the u given to the delay functions that take one; a variable,
	// so that it is not constant-folded.
	draw = 0.5
)

// eachLib runs one sub-benchmark per library, named lib=NAME so that
// benchstat groups them.
func eachLib(b *testing.B, list []lib, run func(b *testing.B, l lib)) {
	for _, l := range list {
		b.Run("lib="+l.name, func(b *testing.B) { run(b, l) })
	}
}

func succeed(context.Context) error { return nil }

// flaky fails its first failures calls with errFlaky, then succeeds. It is
// not safe for concurrent use: each goroutine has its own.
type flaky struct {
	failures int
	calls    int
}

func (f *flaky) call(context.Context) error {
	f.calls++
	if f.calls <= f.failures {
		return errFlaky
	}
	return nil
}

func alwaysFailing() *flaky { return &flaky{failures: math.MaxInt} }

// BenchmarkSuccess: the operation succeeds at once, as almost every call does.
func BenchmarkSuccess(b *testing.B) {
	eachLib(b, libs, func(b *testing.B, l lib) {
		call := l.bind(oneNanosecond, succeed)
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			if err := call(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTwoFailures: two retryable failures, then success, with the
// smallest waits each library allows.
func BenchmarkTwoFailures(b *testing.B) {
	eachLib(b, withTimer, func(b *testing.B, l lib) {
		f := &flaky{failures: 2}
		call := l.bind(oneNanosecond, f.call)
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			f.calls = 0
			if err := call(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if f.calls != 3 {
			b.Fatalf("%d attempts, want 3", f.calls)
		}
	})
}

// BenchmarkSuccessParallel is BenchmarkSuccess on every P at once: one
// shared policy, one context per goroutine.
func BenchmarkSuccessParallel(b *testing.B) {
	eachLib(b, libs, func(b *testing.B, l lib) {
		call := l.bind(oneNanosecond, succeed)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			for pb.Next() {
				if err := call(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkTwoFailuresParallel is BenchmarkTwoFailures on every P at once.
// fn keeps a count, so each goroutine binds its own.
func BenchmarkTwoFailuresParallel(b *testing.B) {
	eachLib(b, withTimer, func(b *testing.B, l lib) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			f := &flaky{failures: 2}
			call := l.bind(oneNanosecond, f.call)
			for pb.Next() {
				f.calls = 0
				if err := call(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkDelay: computing one next delay, without waiting it.
func BenchmarkDelay(b *testing.B) {
	eachLib(b, withRand, func(b *testing.B, l lib) {
		if l.delay == nil {
			b.Skip("no way to compute a delay outside the retry loop")
		}
		l.delay(b)
	})
}

// BenchmarkCancelledWait: the operation fails, the library starts a 1s wait,
// and the caller cancels after 1ms. ns/op is about 1ms plus the time to
// return; us-after-cancel is that time alone, and kept-error is 1 when the
// error returned still carries the operation's error.
func BenchmarkCancelledWait(b *testing.B) {
	eachLib(b, libs, func(b *testing.B, l lib) {
		call := l.bind(oneSecond, alwaysFailing().call)
		var lag time.Duration
		kept := 0
		b.ReportAllocs()
		for b.Loop() {
			late, err := cancelledWait(b.Context(), call)
			if late < 0 {
				b.Fatalf("returned before the cancel: %v", err)
			}
			lag += late
			if errors.Is(err, errFlaky) {
				kept++
			}
		}
		b.ReportMetric(float64(lag)/float64(b.N)/1e3, "us-after-cancel")
		b.ReportMetric(float64(kept)/float64(b.N), "kept-error")
	})
}

// cancelledWait runs call on a context cancelled 1ms after the start, and
// returns how long call took to return after the cancel (negative if it
// returned before), and its error.
func cancelledWait(parent context.Context, call func(context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	start := time.Now()
	var cancelledAt atomic.Int64 // since start; 0 until the cancel
	t := time.AfterFunc(time.Millisecond, func() {
		cancelledAt.Store(int64(time.Since(start)))
		cancel()
	})
	defer t.Stop()
	err := call(ctx)
	returned := time.Since(start)
	at := cancelledAt.Load()
	if at == 0 {
		return -1, err
	}
	return returned - time.Duration(at), err
}

// BenchmarkDeadline: the operation always fails, the waits are 40ms then
// 80ms, and the caller's deadline is 50ms away. A library that looks at the
// deadline gives up after the second attempt, at 40ms; one that does not
// sleeps into the deadline and returns at 50ms. attempts/op, kept-error (1
// when the error returned still carries the operation's error) and
// ms-to-return say which. TestDeadline checks the same in virtual time.
func BenchmarkDeadline(b *testing.B) {
	eachLib(b, noFloor, func(b *testing.B, l lib) {
		f := alwaysFailing()
		call := l.bind(fortyMillis, f.call)
		var took time.Duration
		tries, kept := 0, 0
		b.ReportAllocs()
		for b.Loop() {
			o := deadline(b.Context(), call, f)
			took += o.elapsed
			tries += o.attempts
			if o.kept {
				kept++
			}
		}
		n := float64(b.N)
		b.ReportMetric(float64(tries)/n, "attempts/op")
		b.ReportMetric(float64(kept)/n, "kept-error")
		b.ReportMetric(float64(took)/n/1e6, "ms-to-return")
	})
}

// outcome is what a call returned in a scenario that stops early.
type outcome struct {
	attempts int
	elapsed  time.Duration
	kept     bool // errors.Is(err, errFlaky)
	err      error
}

// deadline runs call, whose fn is f, under a deadline 50ms away.
func deadline(parent context.Context, call func(context.Context) error, f *flaky) outcome {
	ctx, cancel := context.WithTimeout(parent, 50*time.Millisecond)
	defer cancel()
	f.calls = 0
	start := time.Now()
	err := call(ctx)
	return outcome{attempts: f.calls, elapsed: time.Since(start), kept: errors.Is(err, errFlaky), err: err}
}
