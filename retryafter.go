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
// 503 and 504, unless the server's x-should-retry header says otherwise
// (see [ResponseError.RetryDecision]), and the retry loop waits at least
// RetryAfter before the next attempt.
//
// Its fields other than StatusCode and Status hold what the response's
// headers said about the server's load, for the classifier, the retry loop,
// logs and an adaptive limiter; CheckResponse's table says which header sets
// each. Their zero values mean the server said nothing, so a ResponseError
// made by hand, in a test or a simulation, says what its maker sets.
type ResponseError struct {
	// StatusCode is the response's status code, such as 503.
	StatusCode int
	// Status is the response's status line, such as "503 Service Unavailable".
	Status string
	// RetryAfter is the delay the server asked for; 0 if none.
	RetryAfter time.Duration
	// RetryAfterFrom names the header that set RetryAfter, in lower case:
	// "retry-after-ms", "x-ms-retry-after-ms", "retry-after", "ratelimit" or
	// "x-ratelimit-reset"; "" if none did. A header can set a delay of 0.
	RetryAfterFrom string

	// Remaining is the quota the server said is left for the client, in the
	// units of its policy (requests, unless it says otherwise), when
	// RemainingFrom is not "": the smallest r of the RateLimit field, else
	// X-RateLimit-Remaining. 0 means none is left.
	Remaining int64
	// RemainingFrom names the header that set Remaining, in lower case:
	// "ratelimit" or "x-ratelimit-remaining"; "" if the server did not say.
	RemainingFrom string

	// Quota and QuotaWindow describe the RateLimit-Policy policy that
	// applies: the one named by the RateLimit item that set Remaining, else
	// the one of the lowest rate among those that give a window. Quota is
	// its q, the quota units it allows per QuotaWindow, its w; QuotaWindow
	// is 0 when the policy gives no window, and both are 0 when no policy
	// applies (or when it allows nothing).
	Quota       int64
	QuotaWindow time.Duration

	// ShouldRetry is the server's own word on retrying, from its
	// x-should-retry header: [Retry] for "true", [Stop] for "false",
	// [Undecided] when it has none.
	ShouldRetry Decision

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

// RetryDecision returns ShouldRetry when it is [Retry] or [Stop], the
// server's x-should-retry header, and [Undecided] otherwise. As the first rule
// of [DefaultClassifier], it overrides the status rule both ways: a 400 with
// "x-should-retry: true" is retried, a 503 with "false" is not. It has no
// say on a response that retryhttp returned after giving up on it (Undecided),
// nor over the rules the loop applies around any classifier: the caller's
// context, the [Permanent] and [Transient] markers, and an error's
// Unrepeatable method, by which a request that is not idempotent stops
// whatever the server says.
func (e *ResponseError) RetryDecision() Decision {
	if e.spent != nil || (e.ShouldRetry != Retry && e.ShouldRetry != Stop) {
		return Undecided
	}
	return e.ShouldRetry
}

// CheckResponse returns nil for a response with a 1xx, 2xx or 3xx status, and
// a [*ResponseError] for a 4xx or 5xx one, which holds what the response's
// headers say about retrying it:
//
//	header                 forms                        sets                 if malformed
//	retry-after-ms         milliseconds: "1500", "0"    RetryAfter, 1st      ignored
//	x-ms-retry-after-ms    milliseconds                 RetryAfter, 2nd      ignored
//	Retry-After            seconds: "120"; HTTP-date    RetryAfter, 3rd      ignored
//	RateLimit              List: "p";r=0;t=30, ...      RetryAfter, 4th (a)  ignored whole (c)
//	                                                    Remaining, 1st
//	RateLimit-Policy       List: "p";q=100;w=60, ...    Quota, QuotaWindow   ignored whole (c)
//	X-RateLimit-Reset      seconds: "30"; Unix time     RetryAfter, 5th (b)  ignored
//	                       in s or ms
//	X-RateLimit-Remaining  whole number: "0"            Remaining, 2nd       ignored
//	x-should-retry         "true" or "false"            ShouldRetry          ignored
//
// The server's delay, RetryAfter, is the first valid one in that order:
// the Retry-After family first (the RateLimit draft says Retry-After takes
// precedence), then RateLimit, then X-RateLimit-Reset; RetryAfterFrom names
// the header that set it. Remaining is likewise RateLimit's, else
// X-RateLimit-Remaining's. The retry loop waits the longer of its backoff
// and RetryAfter, and stops with [ErrServerDelay] when RetryAfter is above
// [Policy].MaxRetryAfter, whichever header set it.
//
// The forms, in detail:
//
//   - retry-after-ms and x-ms-retry-after-ms: ASCII digits, nothing else.
//     Retry-After: see [ParseRetryAfter]; a date is measured from time.Now.
//   - RateLimit and RateLimit-Policy are Structured Field Lists (RFC 9651;
//     several lines of one field are read as one list) of items named by a
//     String, per draft-ietf-httpapi-ratelimit-headers-11. (a) A RateLimit
//     item says r, the quota left under that policy, and t, the seconds
//     until it is restored: the delay is the longest t among the items
//     with r=0 (an exhausted policy without t gives none), and Remaining is
//     the smallest r. A RateLimit-Policy item gives q, a policy's quota, and
//     w, its window in seconds (see ResponseError for which policy applies).
//   - X-RateLimit-Reset: ASCII digits with an optional fraction ("1.5"),
//     read as seconds from now, as a Unix time in seconds or as one in
//     milliseconds, whichever puts the reset nearest to now: a value above
//     half of now's Unix time in milliseconds is one in milliseconds, else
//     a value above half of now's Unix time is one in seconds (the other
//     readings would be a delay of decades or a reset millennia away). (b)
//     It is the delay
//     only when the quota is the reason for the refusal: when
//     X-RateLimit-Remaining is 0, or when it is absent (or malformed) and
//     the status is 429. With quota left, it says when a window ends, not
//     when to retry.
//   - x-should-retry: "true" or "false" in any case. It overrides the status
//     rule both ways (see [ResponseError.RetryDecision]), never the rules
//     around it: a request that is not idempotent is not retried.
//
// A date, a Unix time or a reset in the past gives a delay of 0; a delay too
// large for a time.Duration gives the largest one. Spaces and tabs around a
// value are ignored, header names are matched in any case, and only the
// first line of a header other than RateLimit and RateLimit-Policy is read.
//
// A malformed value is ignored as if the header were absent: a Retry-After
// of "soon" leaves the delay to RateLimit, then X-RateLimit-Reset, then to
// the backoff alone. So it can neither shorten a wait below the backoff (the
// loop waits at least that) nor stop a call that the valid headers alone
// would let retry. (c) The draft requires a malformed RateLimit or RateLimit-Policy field to
// be ignored whole: one that is not a valid List, has an item that is not a
// String, an r or q that is missing or not a non-negative Integer, a t that
// is not one, or a w that is not a positive one. Other parameters (pk, qu,
// a vendor's) are allowed and not read.
//
// A nil response, or a status outside 100-599, gives an error marked
// [Permanent]: the server's answer cannot be understood, so retrying is
// pointless.
//
// A response that retryhttp returned because its retries were spent (its
// attempts, budget or time ran out on it) gives an error that
// [DefaultClassifier] does not retry, so that a loop around an HTTP client
// that already retries does not multiply its attempts; x-should-retry does
// not change that.
//
// CheckResponse neither reads nor closes the body: the caller still owns it
// and must close it, also before a retry. It allocates the ResponseError,
// and nothing more unless a RateLimit field comes in several lines.
func CheckResponse(resp *http.Response) error {
	if resp == nil {
		return Permanent(errNilResponse)
	}
	code := resp.StatusCode
	if code >= 100 && code < 400 {
		return nil
	}
	re := &ResponseError{StatusCode: code, Status: resp.Status}
	re.read(resp.Header)
	if code < 100 || code > 599 {
		return Permanent(re)
	}
	if resp.Request != nil {
		re.spent, _ = resp.Request.Context().Value(handoff.GaveUp{}).(*Error)
	}
	return re
}

var errNilResponse = errors.New("retry: CheckResponse: nil response")

// read fills e's fields from the response headers h, as CheckResponse's
// table says.
func (e *ResponseError) read(h http.Header) {
	rl := readRateLimit(h)
	x := readXRateLimit(h, e.StatusCode, time.Now)
	switch d, from, ok := retryAfterFamily(h); {
	case ok:
		e.RetryAfter, e.RetryAfterFrom = d, from
	case rl.delayed:
		e.RetryAfter, e.RetryAfterFrom = rl.delay, "ratelimit"
	case x.delayed:
		e.RetryAfter, e.RetryAfterFrom = x.delay, "x-ratelimit-reset"
	}
	switch {
	case rl.hasRemaining:
		e.Remaining, e.RemainingFrom = rl.remaining, "ratelimit"
	case x.hasRemaining:
		e.Remaining, e.RemainingFrom = x.remaining, "x-ratelimit-remaining"
	}
	if rl.hasPolicy {
		e.Quota, e.QuotaWindow = rl.quota, rl.window
	}
	e.ShouldRetry = parseShouldRetry(headerValue(h, "X-Should-Retry"))
}

// retryAfterFamily reads the first valid delay of retry-after-ms,
// x-ms-retry-after-ms and Retry-After, and the name of its header.
func retryAfterFamily(h http.Header) (time.Duration, string, bool) {
	for _, key := range [...]struct{ canonical, name string }{
		{"Retry-After-Ms", "retry-after-ms"},
		{"X-Ms-Retry-After-Ms", "x-ms-retry-after-ms"},
	} {
		if ms, ok := parseDigits(strings.Trim(headerValue(h, key.canonical), " \t")); ok {
			return saturatingMul(ms, time.Millisecond), key.name, true
		}
	}
	if v := headerValue(h, "Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, time.Now()); ok {
			return d, "retry-after", true
		}
	}
	return 0, "", false
}

// headerValue returns the first value of the header whose canonical name
// (as http.CanonicalHeaderKey gives it) is key, as h.Get does without
// canonicalizing key again.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// parseShouldRetry reads an x-should-retry header: "true" or "false" in any
// case, with spaces and tabs around it; anything else says nothing.
func parseShouldRetry(v string) Decision {
	v = strings.Trim(v, " \t")
	switch {
	case strings.EqualFold(v, "true"):
		return Retry
	case strings.EqualFold(v, "false"):
		return Stop
	}
	return Undecided
}
