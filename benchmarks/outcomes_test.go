package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// The scenarios that stop early, run in virtual time, where elapsed times are
// exact. Each row pins what a library does at the version in go.mod, so that
// the README's claims about the peers stay true: a peer that changes its
// behaviour fails here.

// TestDeadline: the operation always fails, the waits are 40ms then 80ms and
// the caller's deadline is 50ms away. Ours gives up after the second attempt,
// at 40ms, since the 80ms wait cannot fit, and keeps the operation's error.
// Every peer sleeps into the deadline and returns at 50ms; only avast (retry-go)
// keeps the operation's error (its error lists every attempt's).
func TestDeadline(t *testing.T) {
	tests := []struct {
		name     string
		lib      lib
		attempts int
		elapsed  time.Duration
		kept     bool
	}{
		{name: "retry", lib: libRetry, attempts: 2, elapsed: 40 * time.Millisecond, kept: true},
		{name: "cenkalti", lib: libCenkalti, attempts: 2, elapsed: 50 * time.Millisecond, kept: false},
		{name: "avast", lib: libRetryGo, attempts: 2, elapsed: 50 * time.Millisecond, kept: true},
		{name: "sethvargo", lib: libGoRetry, attempts: 2, elapsed: 50 * time.Millisecond, kept: false},
		{name: "failsafe", lib: libFailsafe, attempts: 2, elapsed: 50 * time.Millisecond, kept: false},
	}
	var rows []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got outcome
			synctest.Test(t, func(t *testing.T) {
				f := alwaysFailing()
				got = deadline(t.Context(), tt.lib.bind(fortyMillis, f.call), f)
			})
			rows = append(rows, row(tt.name, got))
			assert.Equalf(t, tt.attempts, got.attempts, "attempts = %d, want %d", got.attempts, tt.attempts)
			assert.Equalf(t, tt.elapsed, got.elapsed, "returned after %v, want %v", got.elapsed, tt.elapsed)
			assert.Equalf(t, tt.kept, got.kept, "errors.Is(err, errFlaky) = %v, want %v (err: %v)", got.kept, tt.kept, got.err)
		})
	}
	t.Log("50ms deadline, waits of 40ms then 80ms:\n" + table(rows))
}

// TestCancelledWait: the operation fails, a 1s wait starts and the caller
// cancels after 1ms. Every library returns at once; ours, avast and the
// floor keep the operation's error, the others return only the context's.
func TestCancelledWait(t *testing.T) {
	tests := []struct {
		name string
		lib  lib
		kept bool
	}{
		{name: "direct", lib: libDirect, kept: true},
		{name: "retry", lib: libRetry, kept: true},
		{name: "cenkalti", lib: libCenkalti, kept: false},
		{name: "avast", lib: libRetryGo, kept: true},
		{name: "sethvargo", lib: libGoRetry, kept: false},
		{name: "failsafe", lib: libFailsafe, kept: false},
	}
	var rows []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got outcome
			synctest.Test(t, func(t *testing.T) {
				f := alwaysFailing()
				call := tt.lib.bind(oneSecond, f.call)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				time.AfterFunc(time.Millisecond, cancel)
				start := time.Now()
				err := call(ctx)
				got = outcome{attempts: f.calls, elapsed: time.Since(start), kept: errors.Is(err, errFlaky), err: err}
			})
			rows = append(rows, row(tt.name, got))
			assert.Equalf(t, 1, got.attempts, "attempts = %d, want 1", got.attempts)
			assert.Equalf(t, time.Millisecond, got.elapsed, "returned after %v, want 1ms", got.elapsed)
			assert.Equalf(t, tt.kept, got.kept, "errors.Is(err, errFlaky) = %v, want %v (err: %v)", got.kept, tt.kept, got.err)
		})
	}
	t.Log("1s wait cancelled after 1ms:\n" + table(rows))
}

func row(name string, o outcome) string {
	msg, _, _ := strings.Cut(fmt.Sprint(o.err), "\n")
	return fmt.Sprintf("| %s | %d | %v | %v | %q |", name, o.attempts, o.elapsed, o.kept, msg)
}

func table(rows []string) string {
	return "| lib | attempts | returned after | keeps fn's error | error (first line) |\n|---|---|---|---|---|\n" +
		strings.Join(rows, "\n")
}
