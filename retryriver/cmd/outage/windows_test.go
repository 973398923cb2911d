package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestOverBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		times       []time.Duration
		bound       int
		most, above int
	}{
		{"none", nil, 2, 0, 0},
		{"within", ms(0, 50, 100, 150), 2, 2, 0},
		// [0, 100) holds 0, 10, 20: above 2; 150 is in no such window.
		{"one window above", ms(0, 10, 20, 150), 2, 3, 3},
		// [20, 120) holds 20, 60, 110; [0, 100) holds 0, 20, 60: every
		// time but 300 is in one.
		{"windows that overlap", ms(0, 20, 60, 110, 300), 2, 3, 4},
		// A window is half open: 0 and 100 are never in one together.
		{"half open", ms(0, 100, 200, 300), 1, 1, 0},
		{"all at once", ms(5, 5, 5, 5), 3, 4, 4},
	}
	for _, tt := range tests {
		most, above := overBound(tt.times, 100*time.Millisecond, tt.bound)
		if most != tt.most || above != tt.above {
			t.Errorf("%s: overBound = %d, %d, want %d, %d", tt.name, most, above, tt.most, tt.above)
		}
	}
}

func TestWindowBound(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 30, windowBound(200, 10, 100*time.Millisecond))
	assert.Equal(t, 210, windowBound(200, 10, time.Second))
	assert.Equal(t, 15, windowBound(1000, 5, 10*time.Millisecond))
	assert.Equal(t, 5, windowBound(3, 5, 100*time.Millisecond), "0.3 rounds down")
}

// The cost of a drop: the time at the limit's rate that was not used from
// the drop on, and the longest hole.
func TestDropCost(t *testing.T) {
	t.Parallel()
	// A limit of 10/s, from 1 s to 4 s: 30 slots; 10 came, all in the
	// last second, so 2 s were lost, in one hole of 2 s.
	var times []time.Duration
	for i := range 10 {
		times = append(times, 3*time.Second+time.Duration(i)*100*time.Millisecond)
	}
	cost, gap := dropCost(append(ms(500), times...), time.Second, 4*time.Second, 10)
	assert.Equal(t, 2*time.Second, cost)
	assert.Equal(t, 2*time.Second, gap)
	_, gap = dropCost(ms(1000, 1100), time.Second, 4*time.Second, 10)
	assert.Equal(t, 2900*time.Millisecond, gap, "the end of the run closes the last hole")
}

func TestParseDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		lo, hi time.Duration
		bad    bool
	}{
		{"", 0, 0, false},
		{"0-100ms", 0, 100 * time.Millisecond, false},
		{"10-50ms", 10 * time.Millisecond, 50 * time.Millisecond, false},
		{"1ms-1s", time.Millisecond, time.Second, false},
		{"20ms", 20 * time.Millisecond, 20 * time.Millisecond, false},
		{"50-10ms", 0, 0, true},
		{"fast", 0, 0, true},
		{"-5ms", 0, 0, true},
		{"1-2-3ms", 0, 0, true},
	}
	for _, tt := range tests {
		lo, hi, err := parseDelay("-delay", tt.in)
		if tt.bad {
			assert.Error(t, err, "parseDelay(%q)", tt.in)
			continue
		}
		if assert.NoError(t, err, "parseDelay(%q)", tt.in) {
			assert.Equal(t, [2]time.Duration{tt.lo, tt.hi}, [2]time.Duration{lo, hi}, "parseDelay(%q)", tt.in)
		}
	}
}
