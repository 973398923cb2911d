package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// raNow is the fixed "now" of the ParseRetryAfter tables: a Saturday in 2026,
// so that two-digit years 76 and 77 sit on either side of the 50-year line.
var raNow = time.Date(2026, time.March, 14, 15, 9, 26, 0, time.UTC)

const raMaxDuration = time.Duration(math.MaxInt64)

// parseRetryAfterTests is shared by TestParseRetryAfter and the fuzz seed corpus.
var parseRetryAfterTests = []struct {
	name  string
	value string
	want  time.Duration
	ok    bool
}{
	// delay-seconds = 1*DIGIT
	{name: "zero seconds", value: "0", want: 0, ok: true},
	{name: "seconds", value: "120", want: 120 * time.Second, ok: true},
	{name: "leading zeros", value: "007", want: 7 * time.Second, ok: true},
	{name: "outer spaces and tabs", value: " \t5\t ", want: 5 * time.Second, ok: true},
	{name: "largest exact seconds", value: "9223372036", want: 9223372036 * time.Second, ok: true},
	{name: "one second above the largest Duration saturates", value: "9223372037", want: raMaxDuration, ok: true},
	{name: "huge saturates", value: "99999999999999999999999", want: raMaxDuration, ok: true},
	{name: "huge with leading zeros saturates", value: "000099999999999999999999999", want: raMaxDuration, ok: true},
	{name: "empty", value: ""},
	{name: "only space", value: " "},
	{name: "only tab", value: "\t"},
	{name: "negative", value: "-1"},
	{name: "plus sign", value: "+1"},
	{name: "fraction", value: "1.5"},
	{name: "exponent", value: "1e3"},
	{name: "inner space", value: "1 2"},
	{name: "hex", value: "0x10"},
	{name: "non-ASCII digit", value: "٣"},
	{name: "fullwidth digit", value: "５"},
	{name: "unit suffix", value: "5s"},
	{name: "leading newline", value: "\n5"},
	{name: "trailing newline", value: "5\n"},
	{name: "carriage return", value: "5\r"},
	{name: "no-break space", value: "\u00a05"},
	{name: "huge with a letter", value: "99999999999999999999999x"},

	// IMF-fixdate = day-name "," SP date1 SP time-of-day SP GMT
	{name: "IMF-fixdate in the future", value: "Sat, 14 Mar 2026 15:10:56 GMT", want: 90 * time.Second, ok: true},
	{name: "IMF-fixdate equal to now", value: "Sat, 14 Mar 2026 15:09:26 GMT", want: 0, ok: true},
	{name: "IMF-fixdate one second ago", value: "Sat, 14 Mar 2026 15:09:25 GMT", want: 0, ok: true},
	{name: "IMF-fixdate long ago", value: "Sun, 06 Nov 1994 08:49:37 GMT", want: 0, ok: true},
	{name: "IMF-fixdate with outer spaces", value: " \tSat, 14 Mar 2026 15:10:56 GMT \t", want: 90 * time.Second, ok: true},
	{name: "IMF-fixdate leap day", value: "Tue, 29 Feb 2028 00:00:00 GMT",
		want: time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC).Sub(raNow), ok: true},
	{name: "IMF-fixdate leap second is the next minute", value: "Sat, 14 Mar 2026 15:10:60 GMT", want: 94 * time.Second, ok: true},
	{name: "IMF-fixdate year 9999 saturates", value: "Fri, 31 Dec 9999 23:59:59 GMT", want: raMaxDuration, ok: true},
	{name: "IMF-fixdate day name not matching the date", value: "Mon, 14 Mar 2026 15:10:56 GMT", want: 90 * time.Second, ok: true},

	// rfc850-date = day-name-l "," SP date2 SP time-of-day SP GMT
	{name: "RFC 850 in the future", value: "Saturday, 14-Mar-26 15:10:56 GMT", want: 90 * time.Second, ok: true},
	{name: "RFC 850 long ago", value: "Sunday, 06-Nov-94 08:49:37 GMT", want: 0, ok: true},
	{name: "RFC 850 year 99 is 1999, not 2099", value: "Friday, 31-Dec-99 23:59:59 GMT", want: 0, ok: true},
	{name: "RFC 850 year 30 is 2030", value: "Thursday, 14-Mar-30 15:09:26 GMT",
		want: time.Date(2030, 3, 14, 15, 9, 26, 0, time.UTC).Sub(raNow), ok: true},
	{name: "RFC 850 exactly 50 years ahead stays in this century", value: "Saturday, 14-Mar-76 15:09:26 GMT",
		want: time.Date(2076, 3, 14, 15, 9, 26, 0, time.UTC).Sub(raNow), ok: true},
	{name: "RFC 850 one second more than 50 years ahead is the last century", value: "Saturday, 14-Mar-76 15:09:27 GMT",
		want: 0, ok: true},
	{name: "RFC 850 year 77 is 1977", value: "Monday, 01-Jan-77 00:00:00 GMT", want: 0, ok: true},
	{name: "RFC 850 with outer tab", value: "\tSaturday, 14-Mar-26 15:10:56 GMT", want: 90 * time.Second, ok: true},

	// asctime-date = day-name SP date3 SP time-of-day SP year
	{name: "asctime long ago, one-digit day", value: "Sun Nov  6 08:49:37 1994", want: 0, ok: true},
	{name: "asctime two-digit day", value: "Sun Nov 06 08:49:37 1994", want: 0, ok: true},
	{name: "asctime in the future", value: "Sat Mar 14 15:10:56 2026", want: 90 * time.Second, ok: true},
	{name: "asctime in the future, one-digit day", value: "Wed Apr  1 00:00:00 2026",
		want: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(raNow), ok: true},

	// Zones: IMF-fixdate and rfc850-date require "GMT"; asctime has none.
	{name: "IMF-fixdate PST", value: "Sun, 06 Nov 1994 08:49:37 PST"},
	{name: "IMF-fixdate numeric zone", value: "Sun, 06 Nov 1994 08:49:37 +0000"},
	{name: "IMF-fixdate UTC", value: "Sun, 06 Nov 1994 08:49:37 UTC"},
	{name: "IMF-fixdate UT", value: "Sun, 06 Nov 1994 08:49:37 UT"},
	{name: "IMF-fixdate lower-case gmt", value: "Sun, 06 Nov 1994 08:49:37 gmt"},
	{name: "IMF-fixdate GMT with offset", value: "Sun, 06 Nov 1994 08:49:37 GMT+1"},
	{name: "IMF-fixdate without zone", value: "Sun, 06 Nov 1994 08:49:37"},
	{name: "RFC 850 PST", value: "Sunday, 06-Nov-94 08:49:37 PST"},
	{name: "RFC 850 UTC", value: "Sunday, 06-Nov-94 08:49:37 UTC"},
	{name: "RFC 850 numeric zone", value: "Sunday, 06-Nov-94 08:49:37 -0800"},
	{name: "asctime with GMT", value: "Sun Nov  6 08:49:37 1994 GMT"},
	{name: "asctime with zone before year", value: "Sun Nov  6 08:49:37 GMT 1994"},

	// HTTP-date is case-sensitive.
	{name: "lower-case day name", value: "sun, 06 Nov 1994 08:49:37 GMT"},
	{name: "upper-case month", value: "Sun, 06 NOV 1994 08:49:37 GMT"},
	{name: "upper-case long day name", value: "SUNDAY, 06-Nov-94 08:49:37 GMT"},
	{name: "lower-case asctime month", value: "Sun nov  6 08:49:37 1994"},

	// Every field has its fixed width, every separator is single.
	{name: "IMF-fixdate one-digit day", value: "Sun, 6 Nov 1994 08:49:37 GMT"},
	{name: "IMF-fixdate two-digit year", value: "Sun, 06 Nov 94 08:49:37 GMT"},
	{name: "IMF-fixdate five-digit year", value: "Sun, 06 Nov 19945 08:49:37 GMT"},
	{name: "IMF-fixdate one-digit hour", value: "Sun, 06 Nov 1994 8:49:37 GMT"},
	{name: "IMF-fixdate one-digit minute", value: "Sun, 06 Nov 1994 08:9:37 GMT"},
	{name: "IMF-fixdate one-digit second", value: "Sun, 06 Nov 1994 08:49:7 GMT"},
	{name: "IMF-fixdate double space", value: "Sun,  06 Nov 1994 08:49:37 GMT"},
	{name: "IMF-fixdate double space before zone", value: "Sun, 06 Nov 1994 08:49:37  GMT"},
	{name: "IMF-fixdate fractional second", value: "Sun, 06 Nov 1994 08:49:37.5 GMT"},
	{name: "IMF-fixdate tab separator", value: "Sun,\t06 Nov 1994 08:49:37 GMT"},
	{name: "IMF-fixdate no comma", value: "Sun 06 Nov 1994 08:49:37 GMT"},
	{name: "IMF-fixdate long day name", value: "Sunday, 06 Nov 1994 08:49:37 GMT"},
	{name: "IMF-fixdate dashes", value: "Sun, 06-Nov-1994 08:49:37 GMT"},
	{name: "IMF-fixdate signed day", value: "Sun, +6 Nov 1994 08:49:37 GMT"},
	{name: "RFC 850 one-digit day", value: "Sunday, 6-Nov-94 08:49:37 GMT"},
	{name: "RFC 850 four-digit year", value: "Sunday, 06-Nov-1994 08:49:37 GMT"},
	{name: "RFC 850 signed year", value: "Sunday, 06-Nov--1 08:49:37 GMT"},
	{name: "RFC 850 short day name", value: "Sun, 06-Nov-94 08:49:37 GMT"},
	{name: "RFC 850 one-digit hour", value: "Sunday, 06-Nov-94 8:49:37 GMT"},
	{name: "RFC 850 spaces for dashes", value: "Sunday, 06 Nov 94 08:49:37 GMT"},
	{name: "asctime one space before one-digit day", value: "Sun Nov 6 08:49:37 1994"},
	{name: "asctime space moved after the day", value: "Sun Nov 6  08:49:37 1994"},
	{name: "asctime space and two digits", value: "Sun Nov  06 08:49:37 1994"},
	{name: "asctime two-digit year", value: "Sun Nov  6 08:49:37 94"},
	{name: "asctime comma", value: "Sun, Nov  6 08:49:37 1994"},
	{name: "asctime long day name", value: "Sunday Nov  6 08:49:37 1994"},

	// Values out of range.
	{name: "day 00", value: "Sun, 00 Nov 1994 08:49:37 GMT"},
	{name: "day 32", value: "Sun, 32 Oct 1994 08:49:37 GMT"},
	{name: "November 31st", value: "Thu, 31 Nov 1994 08:49:37 GMT"},
	{name: "February 29th of a common year", value: "Mon, 29 Feb 2027 00:00:00 GMT"},
	{name: "February 29th, 1900", value: "Thu, 29 Feb 1900 00:00:00 GMT"},
	{name: "hour 24", value: "Sun, 06 Nov 1994 24:00:00 GMT"},
	{name: "minute 60", value: "Sun, 06 Nov 1994 08:60:00 GMT"},
	{name: "second 61", value: "Sun, 06 Nov 1994 08:49:61 GMT"},
	{name: "RFC 850 day 32", value: "Sunday, 32-Nov-94 08:49:37 GMT"},
	{name: "asctime day 0", value: "Sun Nov  0 08:49:37 1994"},
	{name: "asctime hour 25", value: "Sun Nov  6 25:49:37 1994"},

	// Garbage.
	{name: "word", value: "tomorrow"},
	{name: "date without time", value: "Sun, 06 Nov 1994"},
	{name: "zone alone", value: "GMT"},
	{name: "comma alone", value: ","},
	{name: "day name and comma", value: "Sunday,"},
	{name: "unknown day name", value: "Xyz, 06 Nov 1994 08:49:37 GMT"},
	{name: "unknown month", value: "Sun, 06 Foo 1994 08:49:37 GMT"},
	{name: "IMF-fixdate length of letters", value: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
	{name: "asctime length of letters", value: "aaaaaaaaaaaaaaaaaaaaaaaa"},
	{name: "RFC 850 length of letters", value: "Sunday,aaaaaaaaaaaaaaaaaaaaaaaa"},
	{name: "ISO 8601", value: "2026-03-14T15:10:56Z"},
	{name: "seconds then date", value: "120 Sun, 06 Nov 1994 08:49:37 GMT"},
	{name: "two dates", value: "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT"},
	{name: "invalid UTF-8", value: "\xff\xfe"},
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := parseRetryAfterTests
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := retry.ParseRetryAfter(tt.value, raNow)
			assert.Equal(t, tt.ok, ok, "ParseRetryAfter(%q) ok = %v, want %v", tt.value, ok, tt.ok)
			assert.Equal(t, tt.want, got, "ParseRetryAfter(%q) = %v, want %v", tt.value, got, tt.want)
		})
	}
}

// raWithMonotonic returns the instant at, carrying a monotonic clock reading
// (which a time.Date never has): time.Now has one and Add keeps it.
func raWithMonotonic(t *testing.T, at time.Time) time.Time {
	t.Helper()
	n := time.Now()
	m := n.Add(at.Sub(n))
	require.True(t, m.Equal(at), "raWithMonotonic(%v) = %v", at, m)
	require.Contains(t, m.String(), " m=", "raWithMonotonic(%v) has no monotonic reading", at)
	return m
}

func TestParseRetryAfterIgnoresLocationAndMonotonicReading(t *testing.T) {
	t.Parallel()
	east := time.FixedZone("UTC+14", 14*60*60)
	west := time.FixedZone("UTC-12", -12*60*60)
	leapNoon := time.Date(2028, time.February, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		now   time.Time
		value string
		want  time.Duration
	}{
		{name: "seconds", now: raNow, value: "120", want: 120 * time.Second},
		{name: "IMF-fixdate", now: raNow, value: "Sat, 14 Mar 2026 15:10:56 GMT", want: 90 * time.Second},
		{name: "IMF-fixdate in the past", now: raNow, value: "Sat, 14 Mar 2026 15:09:25 GMT", want: 0},
		{name: "asctime", now: raNow, value: "Sat Mar 14 15:10:56 2026", want: 90 * time.Second},
		{name: "RFC 850 on the 50-year line", now: raNow, value: "Saturday, 14-Mar-76 15:09:26 GMT",
			want: time.Date(2076, 3, 14, 15, 9, 26, 0, time.UTC).Sub(raNow)},
		{name: "RFC 850 past the 50-year line", now: raNow, value: "Saturday, 14-Mar-76 15:09:27 GMT", want: 0},
		// Fifty years after 2028-02-29 is 2078-03-01 in UTC, but 2078-02-28
		// for a now given in UTC+14 (where it is already March 1st, 2028).
		{name: "RFC 850 50 years after a leap day", now: leapNoon, value: "Monday, 28-Feb-78 20:00:00 GMT",
			want: time.Date(2078, 2, 28, 20, 0, 0, 0, time.UTC).Sub(leapNoon)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mono := raWithMonotonic(t, tt.now)
			nows := []struct {
				name string
				now  time.Time
			}{
				{"UTC", tt.now},
				{"UTC with monotonic reading", mono},
				{"UTC+14", tt.now.In(east)},
				{"UTC-12", tt.now.In(west)},
				{"UTC+14 with monotonic reading", mono.In(east)},
				{"UTC-12 with monotonic reading", mono.In(west)},
			}
			for _, n := range nows {
				got, ok := retry.ParseRetryAfter(tt.value, n.now)
				assert.True(t, ok, "ParseRetryAfter(%q, now in %s) not ok", tt.value, n.name)
				assert.Equal(t, tt.want, got, "ParseRetryAfter(%q, now in %s) = %v, want %v", tt.value, n.name, got, tt.want)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, tt := range parseRetryAfterTests {
		f.Add(tt.value)
	}
	// A now whose every HTTP-date lies less than 292 years ahead, so that the
	// bound on a date's delay is not itself the saturated Duration.
	late := time.Date(9800, time.January, 1, 0, 0, 0, 0, time.UTC)
	latestDate := time.Date(9999, time.December, 31, 23, 59, 60, 0, time.UTC)
	f.Fuzz(func(t *testing.T, value string) {
		trimmed := strings.Trim(value, " \t")
		for _, now := range []time.Time{raNow, late} {
			got, ok := retry.ParseRetryAfter(value, now)
			switch {
			case got < 0:
				t.Fatalf("ParseRetryAfter(%q, %v) = %v, want >= 0", value, now, got)
			case raIsASCIIDigits(trimmed):
				if want := raSecondsDelay(trimmed); got != want || !ok {
					t.Fatalf("ParseRetryAfter(%q, %v) = %v, %v; want %v, true", value, now, got, ok, want)
				}
			case !ok:
				if got != 0 {
					t.Fatalf("ParseRetryAfter(%q, %v) = %v, false; want 0 when not ok", value, now, got)
				}
				raCheckAcceptsCanonicalDate(t, value, trimmed, now)
			default:
				if bound := latestDate.Sub(now); got > bound {
					t.Fatalf("ParseRetryAfter(%q, %v) = %v, want <= %v", value, now, got, bound)
				}
				raCheckAgreesWithNetHTTP(t, value, trimmed, now, got)
			}
		}
	})
}

// raCheckAgreesWithNetHTTP checks a date ParseRetryAfter accepted against
// http.ParseTime, which is more lenient: it must accept the date too (a leap
// second read as the next minute's first), at the same instant, except for
// the century of an RFC 850 two-digit year, which it fixes once and for all.
func raCheckAgreesWithNetHTTP(t *testing.T, value, trimmed string, now time.Time, got time.Duration) {
	t.Helper()
	ht, err := http.ParseTime(trimmed)
	if err != nil {
		// time.Parse rejects a leap second; read it as :59 plus one second.
		ht, err = http.ParseTime(strings.Replace(trimmed, ":60", ":59", 1))
		if err != nil {
			t.Fatalf("ParseRetryAfter(%q) is ok but http.ParseTime fails: %v", value, err)
		}
		ht = ht.Add(time.Second)
	}
	ht = ht.UTC()
	if !strings.Contains(trimmed, "-") { // not the RFC 850 form, the only one with dashes
		if want := max(ht.Sub(now), 0); got != want {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v, want %v (from http.ParseTime)", value, now, got, want)
		}
		return
	}
	if got == 0 || got == raMaxDuration {
		return // the date is lost: in the past, or beyond the largest Duration
	}
	at := now.Add(got).UTC()
	if at.Year()%100 != ht.Year()%100 || at.Month() != ht.Month() || at.Day() != ht.Day() ||
		at.Hour() != ht.Hour() || at.Minute() != ht.Minute() || at.Second() != ht.Second() {
		t.Fatalf("ParseRetryAfter(%q, %v) = %v, which is at %v; want the date of http.ParseTime, %v", value, now, got, at, ht)
	}
	if at.After(now.AddDate(50, 0, 0)) {
		t.Fatalf("ParseRetryAfter(%q, %v) = %v, which is at %v: more than 50 years ahead", value, now, got, at)
	}
}

// raCheckAcceptsCanonicalDate fails if value, rejected by ParseRetryAfter, is
// one of the three HTTP-date forms exactly as Go formats them.
func raCheckAcceptsCanonicalDate(t *testing.T, value, trimmed string, now time.Time) {
	t.Helper()
	ht, err := http.ParseTime(trimmed)
	if err != nil {
		return
	}
	ht = ht.UTC()
	for _, layout := range []string{http.TimeFormat, "Monday, 02-Jan-06 15:04:05 GMT", time.ANSIC} {
		if ht.Format(layout) == trimmed {
			t.Fatalf("ParseRetryAfter(%q, %v) not ok, want ok for a date in the form %q", value, now, layout)
		}
	}
}

func raIsASCIIDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// raSecondsDelay is the delay asked for by a string of ASCII digits, computed
// another way: strconv with overflow detection.
func raSecondsDelay(digits string) time.Duration {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(raMaxDuration/time.Second) {
		return raMaxDuration // out of range: saturate
	}
	return time.Duration(n) * time.Second
}

func TestRetryAfterNil(t *testing.T) {
	t.Parallel()
	assert.NoError(t, retry.RetryAfter(nil, time.Second))
}

type raCustomError struct{ code int }

func (e *raCustomError) Error() string { return "custom " + strconv.Itoa(e.code) }

func TestRetryAfterWraps(t *testing.T) {
	t.Parallel()
	inner := &raCustomError{code: 7}
	base := fmt.Errorf("fetch: %w", inner)
	err := retry.RetryAfter(base, 2*time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, base)
	assert.ErrorIs(t, err, inner)
	var target *raCustomError
	if assert.ErrorAs(t, err, &target) {
		assert.Same(t, inner, target)
	}
	assert.Equal(t, "fetch: custom 7", err.Error())
}

func TestRetryAfterDelay(t *testing.T) {
	t.Parallel()
	errBusy := errors.New("busy")
	tests := []struct {
		name  string
		delay time.Duration
		want  time.Duration
	}{
		{name: "positive", delay: 3 * time.Second, want: 3 * time.Second},
		{name: "zero", delay: 0, want: 0},
		{name: "negative counts as zero", delay: -5 * time.Second, want: 0},
		{name: "most negative counts as zero", delay: math.MinInt64, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A zero backoff makes the wait Next returns the server's delay.
			p := retry.Policy{Backoff: retry.Constant(0), MaxRetryAfter: time.Minute}
			got, stop := retry.Next(p, 1, 0, retry.RetryAfter(errBusy, tt.delay), raNow, time.Time{}, 0.5)
			require.NoError(t, stop)
			assert.Equal(t, tt.want, got, "Next(RetryAfter(err, %v)) = %v, want %v", tt.delay, got, tt.want)
		})
	}
}

func TestResponseErrorError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *retry.ResponseError
		want string
	}{
		{name: "status", err: &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"},
			want: "retry: HTTP 503 Service Unavailable"},
		{name: "status and delay", err: &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: 2 * time.Second},
			want: "retry: HTTP 429 Too Many Requests (retry after 2s)"},
		{name: "code only", err: &retry.ResponseError{StatusCode: 500}, want: "retry: HTTP 500"},
		{name: "zero value", err: &retry.ResponseError{}, want: "retry: HTTP 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.err.Error()
			assert.Equal(t, tt.want, got, "Error() = %q, want %q", got, tt.want)
			assert.True(t, strings.HasPrefix(got, "retry: "), "Error() = %q, want prefix %q", got, "retry: ")
			assert.NotContains(t, got, "\n", "Error() = %q, want one line", got)
		})
	}
}

func TestResponseErrorAs(t *testing.T) {
	t.Parallel()
	resp := &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{"Retry-After": {"4"}}}
	checked := retry.CheckResponse(resp)
	require.Error(t, checked)
	wrapped := []struct {
		name string
		err  error
	}{
		{name: "bare", err: checked},
		{name: "fmt.Errorf", err: fmt.Errorf("get /: %w", checked)},
		{name: "RetryAfter", err: retry.RetryAfter(checked, time.Second)},
		{name: "Transient", err: retry.Transient(checked)},
		{name: "errors.Join", err: errors.Join(io.EOF, checked)},
		{name: "retry.Error", err: &retry.Error{Attempts: 1, Reason: retry.ErrExhausted, Last: checked}},
	}
	for _, w := range wrapped {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			var re *retry.ResponseError
			require.ErrorAs(t, w.err, &re)
			assert.Equal(t, 503, re.StatusCode)
			assert.Equal(t, "503 Service Unavailable", re.Status)
			assert.Equal(t, 4*time.Second, re.RetryAfter)
		})
	}
}

func TestCheckResponseNil(t *testing.T) {
	t.Parallel()
	err := retry.CheckResponse(nil)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "retry: "), "CheckResponse(nil) = %q, want prefix %q", err, "retry: ")

	// Even a classifier that retries everything cannot retry it: it is Permanent.
	calls := 0
	err = retry.Do(t.Context(), func(context.Context) error {
		calls++
		return retry.CheckResponse(nil)
	}, retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Classifier: raRetryEverything})
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.Equal(t, 1, calls, "attempts = %d, want 1", calls)
}

func raRetryEverything(error) retry.Decision { return retry.Retry }

func TestCheckResponseSuccessStatuses(t *testing.T) {
	t.Parallel()
	for _, code := range []int{100, 101, 200, 204, 301, 304, 399} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"5"}}}
			assert.NoError(t, retry.CheckResponse(resp))
		})
	}
	t.Run("every 1xx-3xx", func(t *testing.T) {
		t.Parallel()
		for code := 100; code <= 399; code++ {
			err := retry.CheckResponse(&http.Response{StatusCode: code})
			assert.NoError(t, err, "CheckResponse(status %d) = %v, want nil", code, err)
		}
	})
}

func TestCheckResponseErrorStatuses(t *testing.T) {
	t.Parallel()
	for _, code := range []int{400, 404, 408, 429, 499, 500, 501, 503, 599} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			status := fmt.Sprintf("%d %s", code, http.StatusText(code))
			err := retry.CheckResponse(&http.Response{StatusCode: code, Status: status})
			var re *retry.ResponseError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, code, re.StatusCode)
			assert.Equal(t, status, re.Status)
			assert.Zero(t, re.RetryAfter)

			// Not Permanent: a classifier that retries everything retries it.
			calls := 0
			err = retry.Do(t.Context(), func(context.Context) error {
				calls++
				return retry.CheckResponse(&http.Response{StatusCode: code, Status: status})
			}, retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), Classifier: raRetryEverything})
			assert.ErrorIs(t, err, retry.ErrExhausted)
			assert.Equal(t, 2, calls, "attempts = %d, want 2", calls)
		})
	}
	t.Run("every 4xx-5xx", func(t *testing.T) {
		t.Parallel()
		for code := 400; code <= 599; code++ {
			var re *retry.ResponseError
			if assert.ErrorAs(t, retry.CheckResponse(&http.Response{StatusCode: code}), &re, "status %d", code) {
				assert.Equal(t, code, re.StatusCode)
			}
		}
	})
}

func TestCheckResponseInvalidStatuses(t *testing.T) {
	t.Parallel()
	for _, code := range []int{-1, 0, 99, 600, 999} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{StatusCode: code, Status: strconv.Itoa(code) + " Odd"}
			err := retry.CheckResponse(resp)
			require.Error(t, err)
			var re *retry.ResponseError
			if assert.ErrorAs(t, err, &re) {
				assert.Equal(t, code, re.StatusCode)
			}

			calls := 0
			err = retry.Do(t.Context(), func(context.Context) error {
				calls++
				return retry.CheckResponse(resp)
			}, retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0), Classifier: raRetryEverything})
			assert.ErrorIs(t, err, retry.ErrNotRetryable)
			assert.Equal(t, 1, calls, "attempts = %d, want 1", calls)
		})
	}
}

func TestCheckResponseHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers [][2]string // added with http.Header.Add, which canonicalises the name
		want    time.Duration
	}{
		{name: "none", want: 0},
		{name: "retry-after-ms", headers: [][2]string{{"retry-after-ms", "1500"}}, want: 1500 * time.Millisecond},
		{name: "x-ms-retry-after-ms", headers: [][2]string{{"x-ms-retry-after-ms", "250"}}, want: 250 * time.Millisecond},
		{name: "Retry-After seconds", headers: [][2]string{{"Retry-After", "7"}}, want: 7 * time.Second},
		{name: "retry-after-ms first", headers: [][2]string{
			{"Retry-After", "3"}, {"x-ms-retry-after-ms", "200"}, {"retry-after-ms", "100"}}, want: 100 * time.Millisecond},
		{name: "x-ms-retry-after-ms before Retry-After", headers: [][2]string{
			{"Retry-After", "3"}, {"x-ms-retry-after-ms", "200"}}, want: 200 * time.Millisecond},
		{name: "invalid retry-after-ms falls back to x-ms-retry-after-ms", headers: [][2]string{
			{"retry-after-ms", "abc"}, {"x-ms-retry-after-ms", "200"}, {"Retry-After", "3"}}, want: 200 * time.Millisecond},
		{name: "fractional retry-after-ms falls back to Retry-After", headers: [][2]string{
			{"retry-after-ms", "1.5"}, {"Retry-After", "3"}}, want: 3 * time.Second},
		{name: "both ms headers invalid fall back to Retry-After", headers: [][2]string{
			{"retry-after-ms", "-5"}, {"x-ms-retry-after-ms", ""}, {"Retry-After", "4"}}, want: 4 * time.Second},
		{name: "zero retry-after-ms is valid", headers: [][2]string{
			{"retry-after-ms", "0"}, {"Retry-After", "3"}}, want: 0},
		{name: "zero x-ms-retry-after-ms is valid", headers: [][2]string{
			{"x-ms-retry-after-ms", "0"}, {"Retry-After", "3"}}, want: 0},
		{name: "retry-after-ms with outer spaces", headers: [][2]string{{"retry-after-ms", " 20\t"}}, want: 20 * time.Millisecond},
		{name: "huge retry-after-ms saturates", headers: [][2]string{{"retry-after-ms", "99999999999999999999"}}, want: raMaxDuration},
		{name: "invalid Retry-After", headers: [][2]string{{"Retry-After", "soon"}}, want: 0},
		{name: "past Retry-After date", headers: [][2]string{{"Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"}}, want: 0},
		{name: "upper-case names", headers: [][2]string{{"RETRY-AFTER-MS", "5"}, {"RETRY-AFTER", "3"}}, want: 5 * time.Millisecond},
		{name: "mixed-case names", headers: [][2]string{{"X-MS-Retry-After-MS", "6"}, {"retry-AFTER", "3"}}, want: 6 * time.Millisecond},
		{name: "lower-case Retry-After", headers: [][2]string{{"retry-after", "9"}}, want: 9 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, kv := range tt.headers {
				h.Add(kv[0], kv[1])
			}
			err := retry.CheckResponse(&http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: h})
			var re *retry.ResponseError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.want, re.RetryAfter, "RetryAfter = %v, want %v", re.RetryAfter, tt.want)
		})
	}
}

func TestCheckResponseRetryAfterDate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header func(date string) http.Header
	}{
		{name: "Retry-After date", header: func(date string) http.Header {
			return http.Header{"Retry-After": {date}}
		}},
		{name: "invalid ms headers fall back to the date", header: func(date string) http.Header {
			return http.Header{"Retry-After": {date}, "Retry-After-Ms": {"soon"}, "X-Ms-Retry-After-Ms": {"-1"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				require.Zero(t, time.Now().Nanosecond(), "the bubble's clock starts on a whole second")
				date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
				err := retry.CheckResponse(&http.Response{StatusCode: 429, Header: tt.header(date)})
				var re *retry.ResponseError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, 10*time.Second, re.RetryAfter, "RetryAfter = %v, want 10s", re.RetryAfter)
			})
		})
	}
}

// raSpyBody is a response body that counts what is done to it.
type raSpyBody struct{ reads, closes int }

func (b *raSpyBody) Read([]byte) (int, error) { b.reads++; return 0, io.EOF }
func (b *raSpyBody) Close() error             { b.closes++; return nil }

func TestCheckResponseLeavesBodyAlone(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 404, 503, 0} {
		body := &raSpyBody{}
		resp := &http.Response{StatusCode: code, Body: body, Header: http.Header{"Retry-After": {"1"}}}
		_ = retry.CheckResponse(resp)
		assert.Zero(t, body.reads, "status %d: body read %d times, want 0", code, body.reads)
		assert.Zero(t, body.closes, "status %d: body closed %d times, want 0", code, body.closes)
		assert.Same(t, body, resp.Body, "status %d: body replaced", code)
	}
}

var errRAOverloaded = errors.New("overloaded")

// raAttemptStarts runs retry.Do with p on an fn that fails with fail(n) on its
// n-th attempt (1-based) until fail returns nil, and returns when each
// attempt started, measured from the call, and Do's error.
func raAttemptStarts(ctx context.Context, p retry.Policy, fail func(n int) error) ([]time.Duration, error) {
	start := time.Now()
	var starts []time.Duration
	err := retry.Do(ctx, func(context.Context) error {
		starts = append(starts, time.Since(start))
		return fail(len(starts))
	}, p)
	return starts, err
}

func TestDoWaitsForServerDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var waits []time.Duration
		p := retry.Policy{Backoff: retry.Constant(100 * time.Millisecond), Observe: func(_ context.Context, e retry.Event) {
			if e.Retry {
				waits = append(waits, e.Wait)
			}
		}}
		starts, err := raAttemptStarts(t.Context(), p, func(n int) error {
			if n == 1 {
				return retry.RetryAfter(errRAOverloaded, 2*time.Second)
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 2 * time.Second}, starts, "attempt starts")
		assert.Equal(t, []time.Duration{2 * time.Second}, waits, "observed waits")
	})
}

func TestDoWaitsBackoffWhenLongerThanServerDelay(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := retry.Policy{Backoff: retry.Constant(300 * time.Millisecond)}
		starts, err := raAttemptStarts(t.Context(), p, func(n int) error {
			if n == 1 {
				return retry.RetryAfter(errRAOverloaded, 50*time.Millisecond)
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 300 * time.Millisecond}, starts, "attempt starts")
	})
}

func TestDoWaitsForResponseRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		require.Zero(t, time.Now().Nanosecond(), "the bubble's clock starts on a whole second")
		date := time.Now().Add(4 * time.Second).UTC().Format(http.TimeFormat)
		responses := []*http.Response{
			{StatusCode: 503, Header: http.Header{"Retry-After": {"3"}}},
			{StatusCode: 429, Header: http.Header{"Retry-After": {date}}},
			{StatusCode: 502, Header: http.Header{"Retry-After-Ms": {"1500"}}},
			{StatusCode: 200},
		}
		p := retry.Policy{Backoff: retry.Constant(time.Millisecond)}
		starts, err := raAttemptStarts(t.Context(), p, func(n int) error {
			return retry.CheckResponse(responses[n-1])
		})
		require.NoError(t, err)
		// 3 s after the first attempt; at the date, 4 s after the call began; 1.5 s later.
		assert.Equal(t, []time.Duration{0, 3 * time.Second, 4 * time.Second, 5500 * time.Millisecond}, starts, "attempt starts")
	})
}

func TestDoStopsOnServerDelayAboveCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ceiling time.Duration
		delay   time.Duration
	}{
		{name: "explicit ceiling", ceiling: time.Second, delay: time.Second + time.Nanosecond},
		{name: "default ceiling of 5 minutes", ceiling: 0, delay: 5*time.Minute + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				calls := 0
				err := retry.Do(t.Context(), func(context.Context) error {
					calls++
					return retry.RetryAfter(errRAOverloaded, tt.delay)
				}, retry.Policy{Backoff: retry.Constant(0), MaxRetryAfter: tt.ceiling})
				assert.ErrorIs(t, err, retry.ErrServerDelay)
				assert.ErrorIs(t, err, errRAOverloaded, "the last error is kept")
				var re *retry.Error
				if assert.ErrorAs(t, err, &re) {
					assert.ErrorIs(t, re.Last, errRAOverloaded)
					assert.Equal(t, 1, re.Attempts)
				}
				assert.Equal(t, 1, calls, "attempts = %d, want 1", calls)
				assert.Zero(t, time.Since(start), "stopped after %v, want at once", time.Since(start))
			})
		})
	}
}

func TestDoWaitsServerDelayUpToCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ceiling time.Duration
		delay   time.Duration
	}{
		{name: "at an explicit ceiling", ceiling: time.Second, delay: time.Second},
		{name: "at the default ceiling", ceiling: 0, delay: 5 * time.Minute},
		{name: "negative ceiling means none", ceiling: -1, delay: 24 * time.Hour},
		{name: "negative ceiling, a century", ceiling: -time.Hour, delay: 100 * 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p := retry.Policy{Backoff: retry.Constant(0), MaxRetryAfter: tt.ceiling}
				starts, err := raAttemptStarts(t.Context(), p, func(n int) error {
					if n == 1 {
						return retry.RetryAfter(errRAOverloaded, tt.delay)
					}
					return nil
				})
				require.NoError(t, err)
				assert.Equal(t, []time.Duration{0, tt.delay}, starts, "attempt starts")
			})
		})
	}
}

func TestDoStopsWhenServerDelayPassesDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		delay time.Duration
	}{
		{name: "beyond the deadline", delay: 2 * time.Second},
		{name: "ending at the deadline", delay: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				start := time.Now()
				calls := 0
				err := retry.Do(ctx, func(context.Context) error {
					calls++
					return retry.RetryAfter(errRAOverloaded, tt.delay)
				}, retry.Policy{Backoff: retry.Constant(10 * time.Millisecond)})
				assert.ErrorIs(t, err, retry.ErrNoTimeLeft)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.ErrorIs(t, err, errRAOverloaded, "the last error is kept")
				assert.NotErrorIs(t, err, retry.ErrServerDelay)
				assert.Equal(t, 1, calls, "attempts = %d, want 1", calls)
				assert.Zero(t, time.Since(start), "stopped after %v, want at once", time.Since(start))
			})
		})
	}
}

func TestDoRetriesHTTPServerEndToEnd(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "busy")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()

	var bodies []*raCountingCloser
	got, err := retry.DoValue(t.Context(), func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return "", retry.Permanent(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return "", err
		}
		body := &raCountingCloser{ReadCloser: resp.Body}
		bodies = append(bodies, body)
		defer body.Close()
		if err := retry.CheckResponse(resp); err != nil {
			return "", err
		}
		b, err := io.ReadAll(body)
		return string(b), err
	}, retry.Policy{Backoff: retry.Constant(0)}) // Retry-After: 0 and no backoff: no real sleep
	require.NoError(t, err)
	assert.Equal(t, "ok", got)
	assert.Equal(t, int32(2), requests.Load(), "requests = %d, want 2", requests.Load())
	for i, b := range bodies {
		assert.Equal(t, 1, b.closes, "body %d closed %d times, want 1", i+1, b.closes)
	}
}

type raCountingCloser struct {
	io.ReadCloser
	closes int
}

func (c *raCountingCloser) Close() error { c.closes++; return c.ReadCloser.Close() }

func BenchmarkParseRetryAfter(b *testing.B) {
	benchmarks := []struct {
		name  string
		value string
	}{
		{name: "seconds", value: "120"},
		{name: "IMF-fixdate", value: "Sat, 14 Mar 2026 15:10:56 GMT"},
		{name: "RFC 850", value: "Saturday, 14-Mar-26 15:10:56 GMT"},
		{name: "asctime", value: "Sat Mar 14 15:10:56 2026"},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := retry.ParseRetryAfter(bm.value, raNow); !ok {
					b.Fatalf("ParseRetryAfter(%q) not ok", bm.value)
				}
			}
		})
	}
}

// BenchmarkCheckResponse measures what reading a failed response's headers
// costs, for the header sets servers send. The ResponseError itself is one
// allocation.
func BenchmarkCheckResponse(b *testing.B) {
	benchmarks := []struct {
		name   string
		header http.Header
	}{
		{name: "no headers", header: http.Header{}},
		{name: "Retry-After", header: http.Header{"Retry-After": {"120"}}},
		{name: "retry-after-ms", header: http.Header{"Retry-After-Ms": {"1500"}}},
		{name: "RateLimit", header: http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`},
			"Ratelimit":        {`"burst";r=0;t=30, "daily";r=900;t=50000`},
		}},
		{name: "X-RateLimit-Reset", header: http.Header{
			"X-Ratelimit-Remaining": {"0"},
			"X-Ratelimit-Reset":     {"30"},
		}},
		{name: "all", header: http.Header{
			"Retry-After":           {"120"},
			"Ratelimit-Policy":      {`"burst";q=100;w=60`},
			"Ratelimit":             {`"burst";r=0;t=30`},
			"X-Ratelimit-Remaining": {"0"},
			"X-Ratelimit-Reset":     {"30"},
			"X-Should-Retry":        {"true"},
		}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			resp := &http.Response{StatusCode: 429, Status: "429 Too Many Requests", Header: bm.header}
			b.ReportAllocs()
			for b.Loop() {
				if retry.CheckResponse(resp) == nil {
					b.Fatal("CheckResponse(429) = nil")
				}
			}
		})
	}
}
