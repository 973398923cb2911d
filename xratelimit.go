package retry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// This file reads the X-RateLimit-Remaining and X-RateLimit-Reset headers,
// which many APIs send (GitHub, GitLab, Discord, Twitter, and gateways such
// as Kong and Envoy's rate limit service) with no standard behind them. The
// reset comes in three forms: seconds from now ("30"), the Unix time at
// which the quota is restored ("1767225600"), or that time in milliseconds
// ("1767225600250", as some APIs send it); some servers add a fraction
// ("1.5", "1767225600.250").

// xRateLimit is what a response's X-RateLimit headers say.
type xRateLimit struct {
	remaining    int64
	hasRemaining bool
	delay        time.Duration
	delayed      bool
}

// readXRateLimit reads X-RateLimit-Remaining and X-RateLimit-Reset from h,
// for a response of status code. The reset is the server's delay only when
// it is the reason for the refusal: when X-RateLimit-Remaining is 0, or
// when the status is 429 and X-RateLimit-Remaining is absent or malformed.
// With quota left, the reset says when the window ends, not when to retry.
// now is called only if a reset is read.
func readXRateLimit(h http.Header, code int, now func() time.Time) xRateLimit {
	var x xRateLimit
	if v := headerValue(h, "X-Ratelimit-Remaining"); v != "" {
		x.remaining, x.hasRemaining = parseDigits(strings.Trim(v, " \t"))
	}
	counts := x.hasRemaining && x.remaining == 0 ||
		!x.hasRemaining && code == http.StatusTooManyRequests
	if v := headerValue(h, "X-Ratelimit-Reset"); v != "" && counts {
		x.delay, x.delayed = parseRateLimitReset(v, now())
	}
	return x
}

// parseRateLimitReset parses the value of an X-RateLimit-Reset header and
// returns the delay it asks for, measured from now.
//
// Spaces and tabs around the value are ignored. The value is a number of
// number in ASCII digits, with an optional fraction ("1.5"; no sign or
// exponent), read in whichever of its three forms puts the reset nearer to
// now: seconds from now, a Unix time in seconds, or a Unix time in
// milliseconds. So a value v is a Unix time in milliseconds when v is more
// than half of now's Unix time in milliseconds (the seconds reading would
// put the reset more than 27,000 years away); else a Unix time in seconds
// when v is more than half of now's Unix time (a delay of more than about
// 28 years would be the other reading); and a delay in seconds otherwise.
// A Unix time at or before now gives 0; a fraction finer than a nanosecond
// rounds up, so the delay never ends before the reset. A delay too large
// for a time.Duration gives the largest one. Anything else gives ok ==
// false.
func parseRateLimitReset(value string, now time.Time) (d time.Duration, ok bool) {
	value = strings.Trim(value, " \t")
	whole, fraction, _ := strings.Cut(value, ".")
	secs, ok := parseDigits(whole)
	if !ok {
		return 0, false
	}
	nanos, ok := parseFraction(fraction, len(whole) < len(value))
	if !ok {
		return 0, false
	}
	if n := now.UnixMilli(); n > 0 && secs > n-secs {
		// A Unix time in milliseconds, counted from now's whole
		// millisecond as below; the fraction is of a millisecond.
		ahead := secs - n
		if ahead < 0 {
			return 0, true // at most secs+1 ms <= n: not after now
		}
		d = saturatingMul(ahead, time.Millisecond)
		sub := (nanos + 999) / 1000 // rounded up, so never before the reset
		return max(saturatingAdd(d, time.Duration(sub-int64(now.Nanosecond()%1e6))), 0), true
	}
	if n := now.Unix(); n > 0 && secs > n-secs {
		// A Unix time: the delay is counted from now's whole second, by
		// hand, since time.Unix would wrap for the largest values.
		ahead := secs - n
		if ahead < 0 {
			return 0, true // at most secs+1 <= n: not after now
		}
		d = saturatingMul(ahead, time.Second)
		return max(saturatingAdd(d, time.Duration(nanos-int64(now.Nanosecond()))), 0), true
	}
	return saturatingAdd(saturatingMul(secs, time.Second), time.Duration(nanos)), true
}

// saturatingAdd returns d+extra for a d of 0 or more, or the largest
// Duration if that overflows.
func saturatingAdd(d, extra time.Duration) time.Duration {
	if d == math.MaxInt64 || (extra > 0 && d > math.MaxInt64-extra) {
		return math.MaxInt64
	}
	return d + extra
}

// parseFraction parses the digits after a decimal point as nanoseconds,
// rounding up what is finer. dotted says there was a point, which must be
// followed by at least one digit.
func parseFraction(s string, dotted bool) (int64, bool) {
	if !dotted {
		return 0, true
	}
	if s == "" {
		return 0, false
	}
	var nanos int64
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) {
			return 0, false
		}
		switch {
		case i < 9:
			nanos = nanos*10 + int64(c-'0')
		case c != '0':
			up = true
		}
	}
	for i := len(s); i < 9; i++ {
		nanos *= 10
	}
	if up {
		nanos++ // at most 999999999 + 1: a whole second, which time.Unix and the sum below take
	}
	return nanos, true
}
