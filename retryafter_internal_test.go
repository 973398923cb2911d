package retry

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestServerDelay pins the seam the loop reads a server's delay through: a
// negative delay is stored as 0, so nothing downstream ever sees one.
// serverDelay is the delay the loop reads from an error: that of the
// outermost error in its tree that carries one.
func serverDelay(err error) time.Duration { return inspect(err).delay }

func TestServerDelay(t *testing.T) {
	t.Parallel()
	base := errors.New("busy")
	tests := []struct {
		name string
		err  error
		want time.Duration
	}{
		{name: "nil", err: nil, want: 0},
		{name: "plain error", err: base, want: 0},
		{name: "RetryAfter", err: RetryAfter(base, 3*time.Second), want: 3 * time.Second},
		{name: "RetryAfter negative", err: RetryAfter(base, -3*time.Second), want: 0},
		{name: "RetryAfter most negative", err: RetryAfter(base, math.MinInt64), want: 0},
		{name: "RetryAfter wrapped", err: fmt.Errorf("get: %w", RetryAfter(base, time.Second)), want: time.Second},
		{name: "ResponseError", err: &ResponseError{StatusCode: 503, RetryAfter: 4 * time.Second}, want: 4 * time.Second},
		{name: "Permanent ResponseError", err: Permanent(&ResponseError{StatusCode: 600, RetryAfter: time.Minute}), want: time.Minute},
		{name: "outermost wins", err: RetryAfter(&ResponseError{StatusCode: 503, RetryAfter: 4 * time.Second}, time.Second), want: time.Second},
		{name: "joined, first wins", err: errors.Join(base, RetryAfter(base, 2*time.Second), RetryAfter(base, 5*time.Second)), want: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := serverDelay(tt.err)
			assert.Equal(t, tt.want, got, "serverDelay(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

func TestTwoDigitYear(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		now  time.Time
		yy   int
		want int
	}{
		{"this century", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 30, 2030},
		{"past century", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 99, 1999},
		{"next century late in this one", time.Date(2099, 6, 1, 0, 0, 0, 0, time.UTC), 0, 2100},
		{"fifty years ahead stays", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 76, 2076},
		{"just past fifty years goes back", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 77, 1977},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Nov 30, 00:00:00: the same day of year as now, so 50 years ahead is on the line.
			got := twoDigitYear(tt.yy, time.November, 30, 0, 0, 0, tt.now)
			assert.Equal(t, tt.want, got, "twoDigitYear(%d) = %d, want %d", tt.yy, got, tt.want)
		})
	}
}
