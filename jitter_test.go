package retry_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

func TestJitterString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		j    retry.Jitter
		want string
	}{
		{"zero", 0, "full"},
		{"full", retry.FullJitter, "full"},
		{"equal", retry.EqualJitter, "equal"},
		{"none", retry.NoJitter, "none"},
		{"unnamed acts as full", 3, "full"},
		{"max acts as full", 255, "full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equalf(t, tt.want, tt.j.String(), "Jitter(%d).String() = %q, want %q", uint8(tt.j), tt.j.String(), tt.want)
		})
	}
}

// TestJitterSmallCeilings pins the integer rounding of each jitter on
// ceilings of a few nanoseconds, where an off-by-one would show.
func TestJitterSmallCeilings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		jitter retry.Jitter
		c      time.Duration
		u      float64
		want   time.Duration
	}{
		{"full 1ns u=0", retry.FullJitter, 1, 0, 0},
		{"full 1ns u=belowOne", retry.FullJitter, 1, belowOne, 0},
		{"full 3ns u=0.5", retry.FullJitter, 3, 0.5, 1},
		{"full 3ns u=belowOne", retry.FullJitter, 3, belowOne, 2},
		{"equal 1ns u=0", retry.EqualJitter, 1, 0, 0},
		{"equal 1ns u=belowOne", retry.EqualJitter, 1, belowOne, 0},
		{"equal 3ns u=0", retry.EqualJitter, 3, 0, 1},
		{"equal 3ns u=0.5", retry.EqualJitter, 3, 0.5, 2},
		{"equal 3ns u=belowOne", retry.EqualJitter, 3, belowOne, 2},
		{"equal 4ns u=0.5", retry.EqualJitter, 4, 0.5, 3},
		{"none 3ns", retry.NoJitter, 3, belowOne, 3},
		{"unnamed acts as full", retry.Jitter(9), 3, 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := retry.Exponential{Base: tt.c, Cap: tt.c, Jitter: tt.jitter}
			got := b.Delay(1, 0, tt.u)
			assert.Equalf(t, tt.want, got, "Delay(1, u=%v) = %v, want %v", tt.u, got, tt.want)
		})
	}
}

func TestDecorrelated(t *testing.T) {
	t.Parallel()
	s := time.Second
	def := retry.Decorrelated{}
	tests := []struct {
		name string
		d    retry.Decorrelated
		prev time.Duration
		u    float64
		want time.Duration
	}{
		{"first retry u=0", def, 0, 0, ms(100)},
		{"first retry u=0.5", def, 0, 0.5, ms(200)},
		{"first retry u=belowOne", def, 0, belowOne, ms(300)},
		{"prev 1s u=0", def, s, 0, ms(100)},
		{"prev 1s u=0.5", def, s, 0.5, ms(1550)},
		{"prev 1s u=0.25", def, s, 0.25, ms(825)},
		{"prev 3s u=0.5", def, 3 * s, 0.5, ms(4550)},
		{"prev 5s u=0.9 is capped", def, 5 * s, 0.9, 10 * s},
		{"prev below base counts as base", def, ms(50), 0.5, ms(200)},
		{"negative prev counts as base", def, -s, 0.5, ms(200)},
		{"prev MaxInt64 is capped", def, maxDuration, 0.5, 10 * s},
		{"u=NaN", def, s, math.NaN(), ms(100)},
		{"u=-1", def, s, -1, ms(100)},
		{"u=2", def, 0, 2, ms(300)},
		{"u=+Inf", def, 0, math.Inf(1), ms(300)},
		{"base and cap", retry.Decorrelated{Base: s, Cap: 5 * s}, 0, 0.5, 2 * s},
		{"base and cap, capped", retry.Decorrelated{Base: s, Cap: 5 * s}, 2 * s, 0.9, 5 * s},
		{"cap below base: every wait is the cap", retry.Decorrelated{Base: 2 * s, Cap: s}, 0, 0, s},
		{"cap below base, any prev", retry.Decorrelated{Base: 2 * s, Cap: s}, time.Hour, 0.5, s},
		{"cap equal to base", retry.Decorrelated{Base: s, Cap: s}, 0, 0.5, s},
		{"base only: cap means 10s", retry.Decorrelated{Base: s}, 0, 0.5, 2 * s},
		{"base above the default cap", retry.Decorrelated{Base: 20 * s}, 0, 0.5, 10 * s},
		{"cap only: base means 100ms", retry.Decorrelated{Cap: s}, 0, 0.5, ms(200)},
		{"negative base and cap mean the defaults", retry.Decorrelated{Base: -1, Cap: -1}, s, 0.5, ms(1550)},
		{"cap MaxInt64 never wraps", retry.Decorrelated{Cap: maxDuration}, maxDuration, belowOne, maxDuration},
		{"huge base stays exact", retry.Decorrelated{Base: 1<<60 + 1, Cap: maxDuration}, 0, 0, 1<<60 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// n plays no part.
			for _, n := range []int{math.MinInt, 0, 1, 7, math.MaxInt} {
				got := tt.d.Delay(n, tt.prev, tt.u)
				assert.Equalf(t, tt.want, got, "Delay(%d, prev=%v, u=%v) = %v, want %v", n, tt.prev, tt.u, got, tt.want)
			}
		})
	}
}

// TestDecorrelatedChain carries each wait into the next draw, as the retry
// loop does.
func TestDecorrelatedChain(t *testing.T) {
	t.Parallel()
	d := retry.Decorrelated{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	steps := []struct {
		u    float64
		want time.Duration
	}{
		{0.5, ms(200)},     // 100 + 0.5*(300-100)
		{0.5, ms(350)},     // 100 + 0.5*(600-100)
		{0.5, ms(575)},     // 100 + 0.5*(1050-100)
		{0.5, ms(912.5)},   // 100 + 0.5*(1725-100)
		{0.5, ms(1418.75)}, // 100 + 0.5*(2737.5-100)
		{0.5, 2 * time.Second},
		{0, ms(100)},
		{0.25, ms(150)}, // 100 + 0.25*(300-100)
	}
	var prev time.Duration
	for i, st := range steps {
		got := d.Delay(i+1, prev, st.u)
		assert.Equalf(t, st.want, got, "Delay(%d, prev=%v, u=%v) = %v, want %v", i+1, prev, st.u, got, st.want)
		prev = got
	}
}

// The distribution tests draw from a seeded PCG, so they are deterministic;
// the tolerances are 5 sigma anyway, so any seed passes.
const samples = 100_000

func newRand() *rand.Rand { return rand.New(rand.NewPCG(0x5eed, 0xbac0ff)) }

// assertUniform checks that xs, scaled to [0, 1], look like a uniform sample:
// bounds, mean 1/2 and variance 1/12 within 5 sigma, and a Kolmogorov-Smirnov
// distance below its 5-sigma critical value.
func assertUniform(t *testing.T, xs []float64) {
	t.Helper()
	require.GreaterOrEqual(t, len(xs), 10_000)
	n := float64(len(xs))
	slices.Sort(xs)
	assert.GreaterOrEqualf(t, xs[0], 0.0, "min = %v, want >= 0", xs[0])
	assert.LessOrEqualf(t, xs[len(xs)-1], 1.0, "max = %v, want <= 1", xs[len(xs)-1])
	// With 10,000 draws or more, missing the outer 0.2% at either end has
	// probability below e^-20.
	assert.Lessf(t, xs[0], 0.002, "min = %v, want the low end reached", xs[0])
	assert.Greaterf(t, xs[len(xs)-1], 0.998, "max = %v, want the high end reached", xs[len(xs)-1])

	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / n
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	variance := ss / (n - 1)
	// U(0,1): sd of the mean = sqrt(1/12/n); sd of the sample variance =
	// sqrt((mu4 - sigma^4)/n) = sqrt((1/80 - 1/144)/n) = sqrt(1/180/n).
	assert.InDeltaf(t, 0.5, mean, 5*math.Sqrt(1/12.0/n), "mean = %v, want 1/2", mean)
	assert.InDeltaf(t, 1/12.0, variance, 5*math.Sqrt(1/180.0/n), "variance = %v, want 1/12", variance)

	var ks float64
	for i, x := range xs {
		ks = max(ks, math.Abs(float64(i+1)/n-x), math.Abs(x-float64(i)/n))
	}
	// P(D > c) ~ 2 exp(-2 n c^2); 5 sigma is a tail of 5.7e-7.
	critical := math.Sqrt(math.Log(2/5.7e-7) / (2 * n))
	assert.Lessf(t, ks, critical, "Kolmogorov-Smirnov distance = %v, want < %v", ks, critical)
}

func TestFullJitterDistribution(t *testing.T) {
	t.Parallel()
	r := newRand()
	b := retry.Exponential{} // retry 4: ceiling 800ms
	c := float64(800 * time.Millisecond)
	xs := make([]float64, samples)
	for i := range xs {
		xs[i] = float64(b.Delay(4, 0, r.Float64())) / c
	}
	assertUniform(t, xs)
}

func TestEqualJitterDistribution(t *testing.T) {
	t.Parallel()
	r := newRand()
	b := retry.Exponential{Base: time.Second, Cap: 3 * time.Second, Jitter: retry.EqualJitter} // retry 5: capped at 3s
	half := float64(1500 * time.Millisecond)
	xs := make([]float64, samples)
	for i := range xs {
		xs[i] = (float64(b.Delay(5, 0, r.Float64())) - half) / half
	}
	assertUniform(t, xs)
}

// TestDecorrelatedDistribution: for a fixed prev whose range stays under the
// cap, the wait is uniform on [Base, 3*prev], so its mean is
// Base + (3*prev - Base)/2.
func TestDecorrelatedDistribution(t *testing.T) {
	t.Parallel()
	r := newRand()
	d := retry.Decorrelated{Base: 100 * time.Millisecond, Cap: 10 * time.Second}
	prev := time.Second
	lo, width := float64(d.Base), float64(3*prev-d.Base)
	xs := make([]float64, samples)
	for i := range xs {
		xs[i] = (float64(d.Delay(0, prev, r.Float64())) - lo) / width
	}
	assertUniform(t, xs) // mean 1/2 of the width: Base + (3*prev-Base)/2 = 1550ms
}

// TestDecorrelatedChainBounds runs long chains of random draws, each carrying
// the previous wait, and checks every wait stays in [Base, Cap].
func TestDecorrelatedChainBounds(t *testing.T) {
	t.Parallel()
	r := newRand()
	d := retry.Decorrelated{Base: 100 * time.Millisecond, Cap: 5 * time.Second}
	atCap := 0
	var prev time.Duration
	for i := range samples {
		if i%20 == 0 {
			prev = 0 // a new call
		}
		w := d.Delay(i%20+1, prev, r.Float64())
		if w < d.Base || w > d.Cap {
			t.Fatalf("Delay(prev=%v) = %v, want in [%v, %v]", prev, w, d.Base, d.Cap)
		}
		if w == d.Cap {
			atCap++
		}
		prev = w
	}
	// The waits grow about threefold, so 20-step chains spend much of their
	// time at the cap; a chain that never grew would never get there.
	assert.Greaterf(t, atCap, samples/10, "%d of %d waits at the cap, want more than 10%%", atCap, samples)
}
