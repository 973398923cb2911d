package retry

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/seed93a044d1/retry/internal/handoff"
)

// ParseRetryAfter parses the value of a Retry-After header (RFC 9110, section
// 10.2.3) and returns the delay it asks for, measured from now.
//
// Spaces and tabs around the value are ignored. The value is either a whole
// number of seconds in ASCII digits (leading zeros allowed; no sign, fraction,
// exponent or inner space), or an HTTP-date in any of its three forms:
// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
// ("Sunday, 06-Nov-94 08:49:37 GMT", whose two-digit year is read as RFC 9110
// says: not more than 50 years ahead of now) and ANSI C asctime ("Sun Nov  6
// 08:49:37 1994"). A date is read as RFC 9110's grammar spells it: names are
// case-sensitive, each numeric field has its fixed width, and the zone must be
// "GMT" (asctime has none and is read as GMT); a leap second (:60) is
// accepted, and a day name that does not match the date is not an error. A
// date at or before now gives 0. Only the instant of now matters, not its
// location or monotonic clock reading. A number of seconds too large for a
// time.Duration gives the largest one: it saturates instead of wrapping.
// Anything else gives ok == false.
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	value = strings.Trim(value, " \t")
	if secs, ok := parseDigits(value); ok {
		return saturatingMul(secs, time.Second), true
	}
	t, ok := parseHTTPDate(value, now)
	if !ok {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// parseDigits parses a non-empty string of ASCII digits, saturating at
// math.MaxInt64.
func parseDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64
			continue // keep checking that the rest are digits
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// saturatingMul returns n*unit, or the largest Duration if that overflows.
func saturatingMul(n int64, unit time.Duration) time.Duration {
	if n > int64(math.MaxInt64/unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// parseHTTPDate parses an HTTP-date (RFC 9110, section 5.6.7) in any of its
// three forms, exactly as the grammar spells them: names are case-sensitive,
// every numeric field has its fixed width, separators are single, and the
// zone is the literal "GMT" (asctime has none and is read as GMT). A second
// of 60 (a leap second, which the grammar allows) counts as the next
// minute's first. The day name is checked but not compared with the date,
// which carries the meaning.
//
// It does not use time.Parse, which is lenient where the grammar is not: it
// takes names in any case, one or two digits for an hour, runs of spaces,
// fractional seconds, and a sign in a two-digit year.
func parseHTTPDate(s string, now time.Time) (time.Time, bool) {
	var dd, mm, yy, clock string // the fields, still text
	switch {
	case len(s) == len("Sun, 06 Nov 1994 08:49:37 GMT") && s[3] == ',':
		// IMF-fixdate = day-name "," SP 2DIGIT SP month SP 4DIGIT SP time-of-day SP "GMT"
		if !isDayName(s[:3], shortDayNames[:]) || s[3:5] != ", " || s[7] != ' ' || s[11] != ' ' ||
			s[16] != ' ' || s[25:] != " GMT" {
			return time.Time{}, false
		}
		dd, mm, yy, clock = s[5:7], s[8:11], s[12:16], s[17:25]
	case len(s) == len("Sun Nov  6 08:49:37 1994"):
		// asctime-date = day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP 4DIGIT
		if !isDayName(s[:3], shortDayNames[:]) || s[3] != ' ' || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
			return time.Time{}, false
		}
		dd, mm, yy, clock = s[8:10], s[4:7], s[20:24], s[11:19]
		if dd[0] == ' ' {
			dd = dd[1:]
		}
	default:
		// rfc850-date = day-name-l "," SP 2DIGIT "-" month "-" 2DIGIT SP time-of-day SP "GMT"
		i := strings.IndexByte(s, ',')
		if i < 0 || !isDayName(s[:i], longDayNames[:]) {
			return time.Time{}, false
		}
		r := s[i:]
		if len(r) != len(", 06-Nov-94 08:49:37 GMT") || r[:2] != ", " || r[4] != '-' || r[8] != '-' ||
			r[11] != ' ' || r[20:] != " GMT" {
			return time.Time{}, false
		}
		dd, mm, yy, clock = r[2:4], r[5:8], r[9:11], r[12:20]
	}
	if clock[2] != ':' || clock[5] != ':' {
		return time.Time{}, false
	}
	day, ok1 := digits(dd)
	year, ok2 := digits(yy)
	hour, ok3 := digits(clock[0:2])
	minute, ok4 := digits(clock[3:5])
	sec, ok5 := digits(clock[6:8])
	mon := month(mm)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || mon == 0 || hour > 23 || minute > 59 || sec > 60 {
		return time.Time{}, false
	}
	if len(yy) == 2 {
		year = twoDigitYear(year, mon, day, hour, minute, sec, now)
	}
	if day < 1 || day > daysIn(mon, year) {
		return time.Time{}, false
	}
	return time.Date(year, mon, day, hour, minute, sec, 0, time.UTC), true
}

var (
	shortDayNames = [...]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDayNames  = [...]string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	monthNames    = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

func isDayName(s string, names []string) bool {
	for _, n := range names {
		if s == n {
			return true
		}
	}
	return false
}

// month returns the month named s, or 0.
func month(s string) time.Month {
	for i, n := range monthNames {
		if s == n {
			return time.Month(i + 1)
		}
	}
	return 0
}

// digits parses a date field: a few ASCII digits, no sign, not empty.
func digits(s string) (int, bool) {
	n, ok := parseDigits(s) // fields are at most 4 digits: no saturation
	return int(n), ok
}

// daysIn returns the number of days in month m of year.
func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// twoDigitYear applies RFC 9110's rule for the rfc850-date form: a two-digit
// year yy means the latest year ending in yy that does not put the date more
// than 50 years ahead of now. The comparison is in UTC, like the date, so
// that now's location cannot change the answer.
func twoDigitYear(yy int, mon time.Month, day, hour, minute, sec int, now time.Time) int {
	now = now.UTC()
	limit := now.AddDate(50, 0, 0)
	ahead := func(year int) bool {
		return time.Date(year, mon, day, hour, minute, sec, 0, time.UTC).After(limit)
	}
	year := now.Year()/100*100 + yy
	switch {
	case ahead(year):
		year -= 100
	case !ahead(year + 100):
		year += 100 // late in a century: yy may belong to the next one
	}
	return year
}

// RetryAfter returns an error that wraps err and carries delay, the wait a
// server asked for before the next attempt. The retry loop never starts the
// next attempt earlier: it waits max(delay, backoff). A delay above
// [Policy.MaxRetryAfter] stops the loop with [ErrServerDelay], and one that
// would pass the caller's deadline stops it with [ErrNoTimeLeft]. errors.Is
// and errors.As still reach err. A negative delay counts as 0 (no request).
// When an error tree holds several delays, the outermost one counts, so
// wrapping with RetryAfter overrides a delay inside err. RetryAfter(nil, d)
// is nil.
func RetryAfter(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return &delayed{err: err, delay: max(delay, 0)}
}

type delayed struct {
	err   error
	delay time.Duration
}

func (e *delayed) Error() string              { return e.err.Error() }
func (e *delayed) Unwrap() error              { return e.err }
func (e *delayed) serverDelay() time.Duration { return e.delay }

// serverDelayer is implemented by the errors that carry a server's requested
// delay: those made by RetryAfter, and *ResponseError.
type serverDelayer interface {
	error
	serverDelay() time.Duration
}

// ResponseError is the error [CheckResponse] returns for an HTTP response
// whose status is 4xx or 5xx. [DefaultClassifier] retries 408, 429, 500, 502,
// 503 and 504, and the retry loop waits at least RetryAfter before the next
// attempt.
type ResponseError struct {
	// StatusCode is the response's status code, such as 503.
	StatusCode int
	// Status is the response's status line, such as "503 Service Unavailable".
	Status string
	// RetryAfter is the delay the server asked for; 0 if none.
	RetryAfter time.Duration

	// spent is the retry loop that gave up on this response, when
	// retryhttp returned it after its attempts, budget or time ran out.
	spent *Error
}

// Error returns "retry: HTTP " and the status, and the delay the server
// asked for, if any.
func (e *ResponseError) Error() string {
	status := e.Status
	if status == "" {
		status = fmt.Sprint(e.StatusCode)
	}
	if e.RetryAfter > 0 {
		return fmt.Sprintf("retry: HTTP %s (retry after %v)", status, e.RetryAfter)
	}
	return "retry: HTTP " + status
}

func (e *ResponseError) serverDelay() time.Duration { return e.RetryAfter }

// CheckResponse returns nil for a response with a 1xx, 2xx or 3xx status, and
// a [*ResponseError] for a 4xx or 5xx one. The error's RetryAfter is the first
// valid one of the headers retry-after-ms and x-ms-retry-after-ms (whole
// milliseconds; 0 is valid) and Retry-After (see [ParseRetryAfter], with a
// date measured from time.Now).
//
// A nil response, or a status outside 100-599, gives an error marked
// [Permanent]: the server's answer cannot be understood, so retrying is
// pointless.
//
// A response that retryhttp returned because its retries were spent (its
// attempts, budget or time ran out on it) gives an error that
// [DefaultClassifier] does not retry, so that a loop around an HTTP client
// that already retries does not multiply its attempts.
//
// CheckResponse neither reads nor closes the body: the caller still owns it
// and must close it, also before a retry.
func CheckResponse(resp *http.Response) error {
	if resp == nil {
		return Permanent(errNilResponse)
	}
	code := resp.StatusCode
	if code >= 100 && code < 400 {
		return nil
	}
	re := &ResponseError{StatusCode: code, Status: resp.Status, RetryAfter: responseDelay(resp.Header)}
	if code < 100 || code > 599 {
		return Permanent(re)
	}
	if resp.Request != nil {
		re.spent, _ = resp.Request.Context().Value(handoff.GaveUp{}).(*Error)
	}
	return re
}

var errNilResponse = errors.New("retry: CheckResponse: nil response")

// responseDelay reads the server's requested delay from the response headers.
func responseDelay(h http.Header) time.Duration {
	for _, key := range [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if ms, ok := parseDigits(strings.Trim(h.Get(key), " \t")); ok {
			return saturatingMul(ms, time.Millisecond)
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, time.Now()); ok {
			return d
		}
	}
	return 0
}
