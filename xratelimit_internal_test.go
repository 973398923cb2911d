package retry

import (
	"math"
	"math/big"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// xNow is the fixed "now" of the X-RateLimit-Reset tables: Unix time
// 1773500966.25, a Saturday in March 2026.
var xNow = time.Unix(1773500966, 250_000_000)

var parseRateLimitResetTests = []struct {
	name  string
	value string
	want  time.Duration
	ok    bool
}{
	{name: "seconds", value: "30", want: 30 * time.Second, ok: true},
	{name: "zero", value: "0", want: 0, ok: true},
	{name: "leading zeros", value: "007", want: 7 * time.Second, ok: true},
	{name: "outer spaces and tabs", value: " \t30\t ", want: 30 * time.Second, ok: true},
	{name: "fraction", value: "1.5", want: 1500 * time.Millisecond, ok: true},
	{name: "nanoseconds", value: "0.000000001", want: time.Nanosecond, ok: true},
	{name: "finer than a nanosecond rounds up", value: "0.0000000001", want: time.Nanosecond, ok: true},
	{name: "finer zeros do not round up", value: "2.5000000000", want: 2500 * time.Millisecond, ok: true},
	{name: "a day of seconds", value: "86400", want: 24 * time.Hour, ok: true},
	{name: "28 years of seconds is still a delay", value: "886750483", want: 886750483 * time.Second, ok: true},
	{name: "just above half of now is a Unix time in the past", value: "886750484", want: 0, ok: true},
	{name: "Unix time ahead", value: "1773501026", want: 60*time.Second - 250*time.Millisecond, ok: true},
	{name: "Unix time with a fraction", value: "1773501026.75", want: 60*time.Second + 500*time.Millisecond, ok: true},
	{name: "Unix time equal to now", value: "1773500966.25", want: 0, ok: true},
	{name: "Unix time in the same second, before now", value: "1773500966", want: 0, ok: true},
	{name: "Unix time in the past", value: "1700000000", want: 0, ok: true},
	{name: "Unix time in milliseconds ahead", value: "1773501026000", want: 60*time.Second - 250*time.Millisecond, ok: true},
	{name: "Unix time in milliseconds with a fraction", value: "1773500966300.5", want: 50*time.Millisecond + 500*time.Microsecond, ok: true},
	{name: "Unix time in milliseconds equal to now", value: "1773500966250", want: 0, ok: true},
	{name: "Unix time in milliseconds in the past", value: "1700000000000", want: 0, ok: true},
	{name: "just above half of now in milliseconds is a Unix time in milliseconds", value: "886750483126", want: 0, ok: true},
	{name: "half of now in milliseconds is a Unix time in seconds, far ahead", value: "886750483125", want: math.MaxInt64, ok: true},
	{name: "huge saturates", value: "99999999999999999999999", want: math.MaxInt64, ok: true},
	{name: "huge with a fraction saturates", value: "99999999999.9", want: math.MaxInt64, ok: true},
	{name: "far Unix time", value: "9223372036", want: (9223372036-1773500966)*time.Second - 250*time.Millisecond, ok: true},
	{name: "empty", value: ""},
	{name: "only spaces", value: "  "},
	{name: "negative", value: "-30"},
	{name: "plus sign", value: "+30"},
	{name: "point without digits", value: "30."},
	{name: "point first", value: ".5"},
	{name: "two points", value: "1.2.3"},
	{name: "exponent", value: "1e3"},
	{name: "unit", value: "30s"},
	{name: "duration", value: "1m30s"},
	{name: "date", value: "Sat, 14 Mar 2026 15:10:56 GMT"},
	{name: "inner space", value: "3 0"},
	{name: "comma", value: "1,5"},
	{name: "non-ASCII digit", value: "٣"},
}

func TestParseRateLimitReset(t *testing.T) {
	t.Parallel()
	for _, tt := range parseRateLimitResetTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRateLimitReset(tt.value, xNow)
			assert.Equal(t, tt.ok, ok, "parseRateLimitReset(%q) ok = %v, want %v", tt.value, ok, tt.ok)
			assert.Equal(t, tt.want, got, "parseRateLimitReset(%q) = %v, want %v", tt.value, got, tt.want)
		})
	}
}

// TestParseRateLimitResetBeforeTheEpoch: with a now at or before 1970, no
// value can be a Unix time ahead, so every value is a delay.
func TestParseRateLimitResetBeforeTheEpoch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"1773501026", 1773501026 * time.Second},
		{"9223372036", 9223372036 * time.Second}, // the largest whole seconds a Duration holds
		{"9223372036.854775807", math.MaxInt64},
		{"9223372036.9", math.MaxInt64},
		{"9223372037", math.MaxInt64},
	}
	for _, now := range []time.Time{time.Unix(0, 0), time.Unix(-86400, 0), {}} {
		for _, tt := range tests {
			got, ok := parseRateLimitReset(tt.value, now)
			assert.True(t, ok)
			assert.Equal(t, tt.want, got, "parseRateLimitReset(%q) at %v = %v, want %v", tt.value, now, got, tt.want)
		}
	}
}

var resetSyntax = regexp.MustCompile(`^[ \t]*([0-9]+)(?:\.([0-9]+))?[ \t]*$`)

// FuzzXRateLimitReset checks parseRateLimitReset against arithmetic on big
// integers: never a panic, never a negative delay, never above the largest
// Duration, and never shorter than the reset the value names.
func FuzzXRateLimitReset(f *testing.F) {
	for _, tt := range parseRateLimitResetTests {
		f.Add(tt.value, xNow.Unix(), int64(xNow.Nanosecond()))
	}
	f.Add("946684845", int64(946684800), int64(0))
	f.Add("1", int64(0), int64(0))
	f.Add("9223372037", int64(1), int64(999999999))
	f.Add("18446744073709551615.999999999999", int64(1<<40-1), int64(5))
	f.Add("1767225600250", int64(1767225600), int64(0))   // a Unix time in milliseconds, 250 ms ahead
	f.Add("1767225599999.5", int64(1767225600), int64(7)) // one just past
	f.Add("883612800001", int64(1767225600), int64(0))    // just above half of now in milliseconds
	f.Add("883612800000", int64(1767225600), int64(0))    // just below: a Unix time in seconds
	f.Fuzz(func(t *testing.T, value string, sec, nsec int64) {
		// Any now within 2^40 seconds (about 35,000 years) of 1970: the
		// clocks that exist. Near the ends of int64 a value's saturation at
		// the largest int64 meets now's, and time.Unix wraps.
		now := time.Unix(sec%(1<<40), nsec)
		got, ok := parseRateLimitReset(value, now)
		if got < 0 {
			t.Fatalf("parseRateLimitReset(%q) = %v, want >= 0", value, got)
		}
		m := resetSyntax.FindStringSubmatch(value)
		if ok != (m != nil) {
			t.Fatalf("parseRateLimitReset(%q) ok = %v, want %v", value, ok, m != nil)
		}
		if !ok {
			if got != 0 {
				t.Fatalf("parseRateLimitReset(%q) = %v with ok false, want 0", value, got)
			}
			return
		}
		want := resetOracle(m[1], m[2], now)
		switch {
		case got < want:
			t.Fatalf("parseRateLimitReset(%q, %d.%09d) = %v, want %v: never shorter", value, now.Unix(), now.Nanosecond(), got, want)
		case got != want && want < math.MaxInt64-time.Second:
			// Within a second of the largest Duration, a saturated answer is fine.
			t.Fatalf("parseRateLimitReset(%q, %d.%09d) = %v, want %v", value, now.Unix(), now.Nanosecond(), got, want)
		}
	})
}

// resetOracle computes the delay for whole.fraction seconds with big
// integers, by the documented rule.
func resetOracle(whole, fraction string, now time.Time) time.Duration {
	secs, _ := new(big.Int).SetString(whole, 10)
	frac := big.NewInt(0)
	if fraction != "" {
		f, _ := new(big.Int).SetString(fraction, 10)
		scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fraction))), nil)
		f.Mul(f, big.NewInt(1e9))
		q, r := new(big.Int).QuoRem(f, scale, new(big.Int))
		if r.Sign() != 0 {
			q.Add(q, big.NewInt(1)) // round up
		}
		frac = q
	}
	nowNs := new(big.Int).Mul(big.NewInt(now.Unix()), big.NewInt(1e9))
	nowNs.Add(nowNs, big.NewInt(int64(now.Nanosecond())))
	if ms := big.NewInt(now.UnixMilli()); ms.Sign() > 0 && new(big.Int).Mul(secs, big.NewInt(2)).Cmp(ms) > 0 {
		// Milliseconds since 1970: the fraction is of a millisecond,
		// rounded up to the nanosecond.
		frac = big.NewInt(0)
		if fraction != "" {
			f, _ := new(big.Int).SetString(fraction, 10)
			scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fraction))), nil)
			f.Mul(f, big.NewInt(1e6))
			q, r := new(big.Int).QuoRem(f, scale, new(big.Int))
			if r.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			frac = q
		}
		ns := new(big.Int).Mul(secs, big.NewInt(1e6))
		ns.Add(ns, frac)
		return clampDuration(ns.Sub(ns, nowNs))
	}
	ns := new(big.Int).Mul(secs, big.NewInt(1e9))
	ns.Add(ns, frac)
	n := big.NewInt(now.Unix())
	if n.Sign() > 0 && new(big.Int).Mul(secs, big.NewInt(2)).Cmp(n) > 0 {
		ns.Sub(ns, nowNs)
	}
	return clampDuration(ns)
}

// clampDuration is ns as a Duration, 0 if negative, the largest if too
// large.
func clampDuration(ns *big.Int) time.Duration {
	switch {
	case ns.Sign() < 0:
		return 0
	case !ns.IsInt64():
		return math.MaxInt64
	}
	return time.Duration(ns.Int64())
}

func TestReadXRateLimitReadsNowOnlyForAReset(t *testing.T) {
	t.Parallel()
	calls := 0
	now := func() time.Time { calls++; return xNow }
	x := readXRateLimit(map[string][]string{"X-Ratelimit-Remaining": {"0"}}, 429, now)
	assert.Zero(t, calls, "now called %d times without a reset, want 0", calls)
	assert.True(t, x.hasRemaining)
	assert.False(t, x.delayed)
	x = readXRateLimit(map[string][]string{"X-Ratelimit-Reset": {"30"}, "X-Ratelimit-Remaining": {"1"}}, 429, now)
	assert.Zero(t, calls, "now called %d times for a reset that does not count, want 0", calls)
	assert.False(t, x.delayed)
	x = readXRateLimit(map[string][]string{"X-Ratelimit-Reset": {"30"}}, 429, now)
	assert.Equal(t, 1, calls)
	assert.True(t, x.delayed)
	assert.Equal(t, 30*time.Second, x.delay)
}
