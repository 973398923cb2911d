package retry

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
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
// 08:49:37 1994"). A date must be in GMT. A date at or before now gives 0. A
// number of seconds too large for a time.Duration gives the largest one: it
// saturates instead of wrapping. Anything else gives ok == false.
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

// parseHTTPDate parses the three HTTP-date forms of RFC 9110, section 5.6.7,
// in GMT only.
func parseHTTPDate(s string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(http.TimeFormat, s); err == nil {
		return t, true
	}
	if strings.HasSuffix(s, " GMT") {
		if t, err := time.Parse(time.RFC850, s); err == nil {
			return fixTwoDigitYear(t, now), true
		}
	}
	if t, err := time.Parse(time.ANSIC, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// fixTwoDigitYear applies RFC 9110's rule for the RFC 850 form: a two-digit
// year that would put the date more than 50 years ahead of now means the
// most recent past year with those digits. (time.Parse instead fixes the
// century once and for all: 69-99 mean 19xx.)
func fixTwoDigitYear(t, now time.Time) time.Time {
	year := now.UTC().Year()/100*100 + t.Year()%100
	fixed := time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	if fixed.After(now.AddDate(50, 0, 0)) {
		fixed = time.Date(year-100, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	}
	return fixed
}

// RetryAfter returns an error that wraps err and carries delay, the wait a
// server asked for before the next attempt. The retry loop never starts the
// next attempt earlier: it waits max(delay, backoff). A delay above
// [Policy.MaxRetryAfter] stops the loop with [ErrServerDelay], and one that
// would pass the caller's deadline stops it with [ErrNoTimeLeft]. errors.Is
// and errors.As still reach err. A negative delay counts as 0 (no request).
// RetryAfter(nil, d) is nil.
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

// serverDelay returns the delay carried by the outermost error in err's tree
// that has one.
func serverDelay(err error) time.Duration {
	if sd, ok := find[serverDelayer](err); ok {
		return sd.serverDelay()
	}
	return 0
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
