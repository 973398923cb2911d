package adaptive

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every value falls in the bucket whose range holds it, buckets are in
// order, and none is wider than 1/32 of its values.
func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	check := func(v uint64) {
		t.Helper()
		i := index(v)
		up := upper(i)
		lo := uint64(0)
		if i > 0 {
			lo = upper(i - 1)
		}
		require.True(t, lo <= v && (v < up || up == math.MaxInt64), "index(%d) = %d: [%d, %d)", v, i, lo, up)
		if v >= 2*sub {
			require.LessOrEqual(t, float64(up-lo), float64(lo)/sub, "bucket %d: [%d, %d) wider than 1/32", i, lo, up)
		}
	}
	for v := range uint64(1 << 12) {
		check(v)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		check(r.Uint64N(math.MaxInt64))
	}
	check(math.MaxInt64)
	for i := 1; i < index(math.MaxInt64); i++ {
		require.Less(t, upper(i-1), upper(i), "bucket %d", i)
	}
}

// The Hedge's fields are normalised on first use as their docs say.
func TestHedgeDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		h          *Hedge
		q          float64
		floor, cap time.Duration
		window     int
		minSamples uint64
	}{
		{"zero", &Hedge{}, 0.95, 10 * time.Millisecond, 10 * time.Second, 1000, 200},
		{"NaN quantile", &Hedge{Quantile: math.NaN()}, 0.95, 10 * time.Millisecond, 10 * time.Second, 1000, 200},
		{"quantile 1", &Hedge{Quantile: 1}, 0.95, 10 * time.Millisecond, 10 * time.Second, 1000, 200},
		{"p99.99", &Hedge{Quantile: 0.9999}, 0.999, 10 * time.Millisecond, 10 * time.Second, 20000, 10000},
		{"p50, no floor", &Hedge{Quantile: 0.5, Floor: -1}, 0.5, 0, 10 * time.Second, 1000, 20},
		{"cap below floor", &Hedge{Floor: time.Second, Cap: time.Millisecond}, 0.95, time.Second, time.Second, 1000, 200},
	}
	for _, tt := range tests {
		s := tt.h.load()
		assert.InDelta(t, tt.q, s.q, 1e-12, tt.name)
		assert.Equal(t, tt.floor, s.floor, tt.name)
		assert.Equal(t, tt.cap, s.cap, tt.name)
		assert.Len(t, s.ring, tt.window, tt.name)
		assert.Equal(t, tt.minSamples, s.minSamples, tt.name)
	}
}
