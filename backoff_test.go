package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
)

// belowOne is the largest u a uniform draw in [0, 1) can give.
var belowOne = math.Nextafter(1, 0)

const maxDuration = time.Duration(math.MaxInt64)

// schedule returns the waits before retries 1..n with one fixed u.
func schedule(b retry.Backoff, u float64, n int) []time.Duration {
	waits := make([]time.Duration, n)
	for i := range waits {
		waits[i] = b.Delay(i+1, 0, u)
	}
	return waits
}

func ms(d float64) time.Duration { return time.Duration(d * float64(time.Millisecond)) }

func TestExponentialSchedule(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name string
		b    retry.Exponential
		u    float64
		want []time.Duration
	}{
		{"zero value u=0", retry.Exponential{}, 0,
			[]time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"zero value u=0.5", retry.Exponential{}, 0.5,
			[]time.Duration{ms(50), ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), 5 * s, 5 * s}},
		{"zero value u=belowOne stays 1ns under the ceiling", retry.Exponential{}, belowOne,
			[]time.Duration{ms(100) - 1, ms(200) - 1, ms(400) - 1, ms(800) - 1, ms(1600) - 1, ms(3200) - 1, ms(6400) - 1, 10*s - 1, 10*s - 1}},
		{"no jitter", retry.Exponential{Jitter: retry.NoJitter}, 0.5,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), ms(6400), 10 * s, 10 * s}},
		{"equal jitter u=0", retry.Exponential{Jitter: retry.EqualJitter}, 0,
			[]time.Duration{ms(50), ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200), 5 * s, 5 * s}},
		{"equal jitter u=0.5", retry.Exponential{Jitter: retry.EqualJitter}, 0.5,
			[]time.Duration{ms(75), ms(150), ms(300), ms(600), ms(1200), ms(2400), ms(4800), ms(7500), ms(7500)}},
		{"multiplier 1.5", retry.Exponential{Multiplier: 1.5, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(150), ms(225), ms(337.5), ms(506.25), ms(759.375), ms(1139.0625),
				ms(1708.59375), ms(2562.890625), ms(3844.3359375), 5766503906, 8649755859, 10 * s, 10 * s}},
		{"multiplier 3", retry.Exponential{Multiplier: 3, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(300), ms(900), ms(2700), ms(8100), 10 * s, 10 * s}},
		{"multiplier 1 is constant", retry.Exponential{Multiplier: 1, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(100), ms(100), ms(100)}},
		{"multiplier 0.5 means 2", retry.Exponential{Multiplier: 0.5, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800)}},
		{"negative multiplier means 2", retry.Exponential{Multiplier: -3, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800)}},
		{"NaN multiplier means 2", retry.Exponential{Multiplier: math.NaN(), Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800)}},
		{"+Inf multiplier jumps to the cap", retry.Exponential{Multiplier: math.Inf(1), Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), 10 * s, 10 * s}},
		{"base and cap", retry.Exponential{Base: 500 * time.Millisecond, Cap: 3 * s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(500), ms(1000), ms(2000), 3 * s, 3 * s}},
		{"base above cap: every ceiling is the cap", retry.Exponential{Base: 5 * s, Cap: s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{s, s, s}},
		{"base above cap, full jitter", retry.Exponential{Base: 5 * s, Cap: s}, 0.5,
			[]time.Duration{ms(500), ms(500)}},
		{"base above default cap", retry.Exponential{Base: 20 * s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{10 * s, 10 * s}},
		{"zero base means 100ms", retry.Exponential{Cap: s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800), s, s}},
		{"negative base means 100ms", retry.Exponential{Base: -s, Cap: s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{ms(100), ms(200), ms(400), ms(800), s, s}},
		{"zero cap means 10s", retry.Exponential{Base: 3 * s, Jitter: retry.NoJitter}, 0,
			[]time.Duration{3 * s, 6 * s, 10 * s}},
		{"negative cap means 10s", retry.Exponential{Base: 3 * s, Cap: -1, Jitter: retry.NoJitter}, 0,
			[]time.Duration{3 * s, 6 * s, 10 * s}},
		{"1ns base doubles exactly", retry.Exponential{Base: 1, Cap: maxDuration, Jitter: retry.NoJitter}, 0,
			[]time.Duration{1, 2, 4, 8, 16}},
		{"huge base with multiplier 1.5 starts at base exactly", retry.Exponential{Base: 1<<60 + 1, Cap: maxDuration, Multiplier: 1.5, Jitter: retry.NoJitter}, 0,
			[]time.Duration{1<<60 + 1, 3 << 59, 9 << 58, 27 << 57, 81 << 56, 243 << 55, maxDuration}},
		{"huge base with multiplier 1 stays at base", retry.Exponential{Base: 1<<60 + 1, Cap: maxDuration, Multiplier: 1, Jitter: retry.NoJitter}, 0,
			[]time.Duration{1<<60 + 1, 1<<60 + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schedule(tt.b, tt.u, len(tt.want))
			for i := range got {
				assert.Equalf(t, tt.want[i], got[i], "Delay(%d) = %v, want %v", i+1, got[i], tt.want[i])
			}
		})
	}
}

// TestExponentialN pins the retry numbers at the edges: below 1 counts as 1,
// and the doubling saturates at the cap instead of shifting out of range.
func TestExponentialN(t *testing.T) {
	t.Parallel()
	def := retry.Exponential{Jitter: retry.NoJitter}
	wide := retry.Exponential{Base: 1, Cap: maxDuration, Jitter: retry.NoJitter}
	wide15 := retry.Exponential{Base: 1, Cap: maxDuration, Multiplier: 1.5, Jitter: retry.NoJitter}
	tests := []struct {
		name string
		b    retry.Exponential
		n    int
		want time.Duration
	}{
		{"MinInt", def, math.MinInt, ms(100)},
		{"-5", def, -5, ms(100)},
		{"0", def, 0, ms(100)},
		{"1", def, 1, ms(100)},
		{"63", def, 63, 10 * time.Second},
		{"64", def, 64, 10 * time.Second},
		{"1000", def, 1000, 10 * time.Second},
		{"MaxInt", def, math.MaxInt, 10 * time.Second},
		{"wide 0", wide, 0, 1},
		{"wide 62", wide, 62, 1 << 61},
		{"wide 63", wide, 63, 1 << 62},
		{"wide 64", wide, 64, maxDuration},
		{"wide 65", wide, 65, maxDuration},
		{"wide 1000", wide, 1000, maxDuration},
		{"wide MaxInt", wide, math.MaxInt, maxDuration},
		{"wide x1.5 -5", wide15, -5, 1},
		{"wide x1.5 1000", wide15, 1000, maxDuration},
		{"wide x1.5 MaxInt", wide15, math.MaxInt, maxDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.Delay(tt.n, 0, 0)
			assert.Equalf(t, tt.want, got, "Delay(%d) = %v, want %v", tt.n, got, tt.want)
		})
	}
}

// TestExponentialU pins how out-of-range draws are clamped to [0, 1).
func TestExponentialU(t *testing.T) {
	t.Parallel()
	c := ms(800) // the ceiling of retry 4
	tests := []struct {
		name   string
		u      float64
		full   time.Duration
		equal  time.Duration
		noJitt time.Duration
	}{
		{"0", 0, 0, c / 2, c},
		{"0.25", 0.25, c / 4, c/2 + c/8, c},
		{"belowOne", belowOne, c - 1, c - 1, c},
		{"1", 1, c - 1, c - 1, c},
		{"2", 2, c - 1, c - 1, c},
		{"+Inf", math.Inf(1), c - 1, c - 1, c},
		{"-1", -1, 0, c / 2, c},
		{"-Inf", math.Inf(-1), 0, c / 2, c},
		{"NaN", math.NaN(), 0, c / 2, c},
		{"smallest positive", math.SmallestNonzeroFloat64, 0, c / 2, c},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, j := range []struct {
				jitter retry.Jitter
				want   time.Duration
			}{{retry.FullJitter, tt.full}, {retry.EqualJitter, tt.equal}, {retry.NoJitter, tt.noJitt}} {
				got := retry.Exponential{Jitter: j.jitter}.Delay(4, 0, tt.u)
				assert.Equalf(t, j.want, got, "%v jitter: Delay(4, u=%v) = %v, want %v", j.jitter, tt.u, got, j.want)
			}
		})
	}
}

// TestExponentialHugeCap checks that a cap near the largest Duration never
// wraps: every wait of every schedule stays in [0, Cap] and the ceilings
// never shrink as n grows.
func TestExponentialHugeCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    retry.Exponential
	}{
		{"MaxInt64", retry.Exponential{Base: time.Second, Cap: maxDuration}},
		{"MaxInt64-1", retry.Exponential{Base: time.Second, Cap: maxDuration - 1}},
		{"MaxInt64-1023", retry.Exponential{Base: 1, Cap: maxDuration - 1023}},
		{"2^62+1", retry.Exponential{Base: 3, Cap: 1<<62 + 1}},
		{"MaxInt64 x1.5", retry.Exponential{Base: time.Second, Cap: maxDuration, Multiplier: 1.5}},
		{"MaxInt64-1 x3", retry.Exponential{Base: 7, Cap: maxDuration - 1, Multiplier: 3}},
		{"MaxInt64 x1.01", retry.Exponential{Base: maxDuration / 2, Cap: maxDuration, Multiplier: 1.01}},
	}
	us := []float64{0, 0.5, 0.999, belowOne, 1, math.Inf(1)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var prevCeiling time.Duration
			for n := 1; n <= 200; n++ {
				b := tt.b
				b.Jitter = retry.NoJitter
				ceiling := b.Delay(n, 0, 0)
				assert.GreaterOrEqualf(t, ceiling, prevCeiling, "Delay(%d) = %v, want >= Delay(%d) = %v", n, ceiling, n-1, prevCeiling)
				assert.LessOrEqualf(t, ceiling, tt.b.Cap, "Delay(%d) = %v, want <= Cap %v", n, ceiling, tt.b.Cap)
				prevCeiling = ceiling
				for _, j := range []retry.Jitter{retry.FullJitter, retry.EqualJitter} {
					b.Jitter = j
					for _, u := range us {
						got := b.Delay(n, 0, u)
						assert.Truef(t, got >= 0 && got <= ceiling, "%v jitter: Delay(%d, u=%v) = %v, want in [0, %v]", j, n, u, got, ceiling)
					}
				}
			}
			assert.Equal(t, tt.b.Cap, prevCeiling, "the schedule never reached the cap")
		})
	}
	// The top of the range, exactly: float64(MaxInt64) rounds up to 2^63, and
	// a naive conversion back would wrap to MinInt64.
	top := retry.Exponential{Base: maxDuration, Cap: maxDuration}
	assert.Equal(t, maxDuration-1023, top.Delay(1, 0, belowOne), "full jitter at MaxInt64")
	top.Jitter = retry.EqualJitter
	assert.Equal(t, maxDuration-512, top.Delay(1, 0, belowOne), "equal jitter at MaxInt64")
	top.Jitter = retry.NoJitter
	assert.Equal(t, maxDuration, top.Delay(1, 0, belowOne), "no jitter at MaxInt64")
}

// TestExponentialIgnoresPrev: the schedule depends on n only.
func TestExponentialIgnoresPrev(t *testing.T) {
	t.Parallel()
	for _, prev := range []time.Duration{-time.Second, 0, time.Hour, maxDuration} {
		got := retry.Exponential{}.Delay(3, prev, 0.5)
		assert.Equalf(t, ms(200), got, "Delay(3, prev=%v) = %v, want 200ms", prev, got)
	}
}

func TestConstant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    retry.Constant
		want time.Duration
	}{
		{"zero", 0, 0},
		{"second", retry.Constant(time.Second), time.Second},
		{"1ns", 1, 1},
		{"max", retry.Constant(maxDuration), maxDuration},
		{"negative", retry.Constant(-time.Second), 0},
		{"min", retry.Constant(math.MinInt64), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// n, prev and u play no part.
			for _, n := range []int{math.MinInt, 0, 1, 2, 1000, math.MaxInt} {
				for _, u := range []float64{0, 0.5, belowOne, math.NaN(), -1} {
					got := tt.c.Delay(n, time.Hour, u)
					assert.Equalf(t, tt.want, got, "Delay(%d, u=%v) = %v, want %v", n, u, got, tt.want)
				}
			}
		})
	}
}

// FuzzDelay checks the bounds every backoff promises for any input:
// Exponential: 0 <= wait <= ceiling <= Cap, full jitter in [0, ceiling),
// equal jitter in [ceiling/2, ceiling), ceilings that never shrink with n;
// Decorrelated: min(Base, Cap) <= wait <= Cap, and wait <= 3*max(prev, Base)
// where float64 holds that exactly;
// Constant: max(c, 0).
func FuzzDelay(f *testing.F) {
	f.Add(1, int64(0), 0.5, int64(0), int64(0), 0.0, uint8(0))
	f.Add(64, int64(time.Second), belowOne, int64(1), int64(math.MaxInt64), 2.0, uint8(1))
	f.Add(math.MaxInt, int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), uint8(2))
	f.Add(-5, int64(-1), math.NaN(), int64(-1), int64(-1), math.NaN(), uint8(3))
	f.Add(30, int64(5*time.Second), 0.999, int64(time.Second), int64(math.MaxInt64-1), 1.5, uint8(2))
	f.Add(2, int64(1), -1.0, int64(5*time.Second), int64(time.Second), 0.5, uint8(1))
	f.Add(1, int64(0), 0.0, int64(1<<60+1), int64(math.MaxInt64), 1.0, uint8(2))
	f.Fuzz(func(t *testing.T, n int, prev int64, u float64, base, limit int64, mult float64, jitter uint8) {
		capOf := func(limit time.Duration) time.Duration {
			if limit <= 0 {
				return 10 * time.Second
			}
			return limit
		}
		effCap := capOf(time.Duration(limit))

		e := retry.Exponential{Base: time.Duration(base), Cap: time.Duration(limit), Multiplier: mult, Jitter: retry.NoJitter}
		c := e.Delay(n, time.Duration(prev), u)
		if c < 0 || c > effCap {
			t.Fatalf("%+v.Delay(%d) = %v, want in [0, %v]", e, n, c, effCap)
		}
		if n < math.MaxInt {
			if next := e.Delay(n+1, 0, u); next < c {
				t.Fatalf("%+v.Delay(%d) = %v, want >= Delay(%d) = %v", e, n+1, next, n, c)
			}
		}
		e.Jitter = retry.FullJitter
		if w := e.Delay(n, time.Duration(prev), u); w < 0 || w >= max(c, 1) {
			t.Fatalf("%+v.Delay(%d, u=%v) = %v, want in [0, %v)", e, n, u, w, c)
		}
		e.Jitter = retry.EqualJitter
		if w := e.Delay(n, time.Duration(prev), u); w < c/2 || w >= max(c, 1) {
			t.Fatalf("%+v.Delay(%d, u=%v) = %v, want in [%v, %v)", e, n, u, w, c/2, c)
		}
		e.Jitter = retry.Jitter(jitter) // any value, the unnamed ones included
		if w := e.Delay(n, time.Duration(prev), u); w < 0 || w > c {
			t.Fatalf("%+v.Delay(%d, u=%v) = %v, want in [0, %v]", e, n, u, w, c)
		}

		d := retry.Decorrelated{Base: time.Duration(base), Cap: time.Duration(limit)}
		effBase := time.Duration(base)
		if effBase <= 0 {
			effBase = 100 * time.Millisecond
		}
		w := d.Delay(n, time.Duration(prev), u)
		if w < min(effBase, effCap) || w > effCap {
			t.Fatalf("%+v.Delay(prev=%v, u=%v) = %v, want in [%v, %v]", d, time.Duration(prev), u, w, min(effBase, effCap), effCap)
		}
		if from := max(time.Duration(prev), effBase); from <= 1<<51 && w > 3*from {
			t.Fatalf("%+v.Delay(prev=%v, u=%v) = %v, want <= %v", d, time.Duration(prev), u, w, 3*from)
		}

		k := retry.Constant(prev)
		if got := k.Delay(n, 0, u); got != max(time.Duration(prev), 0) {
			t.Fatalf("Constant(%v).Delay(%d) = %v, want %v", time.Duration(prev), n, got, max(time.Duration(prev), 0))
		}
	})
}

// TestDelayAllocs pins the zero-allocation promise of every backoff, called
// through the interface as the retry loop calls it.
func TestDelayAllocs(t *testing.T) { // not parallel: AllocsPerRun forbids it
	backoffs := []retry.Backoff{
		retry.Exponential{},
		retry.Exponential{Multiplier: 1.5},
		retry.Decorrelated{},
		retry.Constant(time.Second),
	}
	for _, b := range backoffs {
		n := 0
		allocs := testing.AllocsPerRun(1000, func() {
			n++
			_ = b.Delay(n%70, time.Duration(n), 0.5)
		})
		assert.Zerof(t, allocs, "%T.Delay allocates %v times per call, want 0", b, allocs)
	}
}

func BenchmarkDelay(b *testing.B) {
	benchmarks := []struct {
		name string
		b    retry.Backoff
	}{
		{"Exponential", retry.Exponential{}},
		{"Exponential/Multiplier=1.5", retry.Exponential{Multiplier: 1.5}},
		{"Exponential/EqualJitter", retry.Exponential{Jitter: retry.EqualJitter}},
		{"Decorrelated", retry.Decorrelated{}},
		{"Constant", retry.Constant(time.Second)},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			n, prev := 0, time.Duration(0)
			for b.Loop() {
				// n runs over 1..16, past the 10s cap of the defaults, so
				// both the growing and the capped paths are measured.
				n = n&15 + 1
				prev = bm.b.Delay(n, prev, 0.5)
			}
		})
	}
}
