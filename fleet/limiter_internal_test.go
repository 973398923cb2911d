package fleet

import (
	"testing"
	"time"
)

// The pause after a failure: 10ms growing 1.5 times a failure up to 100ms, of
// which the draw takes off up to half.
func TestPauseAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fails int
		u     float64
		want  time.Duration
	}{
		{0, 0, 5 * time.Millisecond},
		{0, 0.5, 7500 * time.Microsecond},
		{1, 0, 7500 * time.Microsecond},
		{2, 0.999999, 22499988 * time.Nanosecond},
		{5, 0, 37968750 * time.Nanosecond},
		{6, 0, 50 * time.Millisecond},
		{6, 0.999999, 99999950 * time.Nanosecond},
		{1000, 0, 50 * time.Millisecond},
		{-1, 0, 3333333 * time.Nanosecond}, // not called so, but no surprise either
	}
	for _, tt := range tests {
		if got := pauseAfter(tt.fails, tt.u); got != tt.want {
			t.Errorf("pauseAfter(%d, %v) = %v, want %v", tt.fails, tt.u, got, tt.want)
		}
	}
}
