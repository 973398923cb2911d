package adaptive

import (
	"net/http"
	"time"

	"github.com/seed93a044d1/retry"
)

// throttled reports whether err is a throttling answer: the provider says
// it is over the capacity it grants this client, so sending slower would
// help. Anywhere in err's tree: a *retry.ResponseError with status 429, or
// 503 with a server delay, or a RateLimit quota of 0 left (see quotaSpent);
// or an error with a method Throttled() bool that returns true (retrygrpc's
// per-attempt error, for RESOURCE_EXHAUSTED).
//
// A 503 without a delay is not one: it says the provider is down or
// failing, which the Budget answers, not the rate. Nor is a timeout.
func throttled(err error) bool {
	return find(err, isThrottle, 0) != nil
}

// isThrottle reports whether err itself, not the errors it wraps, is a
// throttling answer.
func isThrottle(err error) bool {
	switch e := err.(type) {
	case *retry.ResponseError:
		return e != nil && throttlingResponse(e)
	case interface{ Throttled() bool }:
		return e.Throttled()
	}
	return false
}

// maxDepth bounds the walk of an error tree, against a cycle.
const maxDepth = 64

// find returns the first error of err's tree, depth first, for which match
// is true, or nil. It walks by hand, as the core's classifier does, so that
// no target escapes to the heap.
func find(err error, match func(error) bool, depth int) error {
	for ; err != nil && depth < maxDepth; depth++ {
		if match(err) {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := find(e, match, depth+1); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// throttlingResponse reports whether an HTTP answer is a throttling one.
func throttlingResponse(e *retry.ResponseError) bool {
	switch {
	case e.StatusCode == http.StatusTooManyRequests:
		return true
	case e.StatusCode == http.StatusServiceUnavailable && e.RetryAfter > 0:
		return true
	}
	return quotaSpent(e)
}

// quotaSpent reports whether the server said that no quota is left for the
// client (a RateLimit r=0, or X-RateLimit-Remaining: 0), on any error
// status: GitHub, for one, refuses a spent quota with 403.
func quotaSpent(e *retry.ResponseError) bool {
	return e.RemainingFrom != "" && e.Remaining == 0
}

// delayProbe is a Policy under which retry.Next returns the server's delay
// that err carries as the wait: no backoff, no ceiling, no count limit, and
// every error retryable.
var delayProbe = retry.Policy{
	MaxAttempts:   -1,
	Backoff:       retry.Constant(0),
	Classifier:    func(error) retry.Decision { return retry.Retry },
	MaxRetryAfter: -1,
}

// serverDelay returns the delay the server asked for in err, however err
// carries it (a *retry.ResponseError, retry.RetryAfter, an adapter's own),
// as the core reads it; 0 if none. A rule of safety that stops err (its
// Unrepeatable method) leaves retry.Next no wait to give, so the
// *retry.ResponseError is then read directly.
func serverDelay(err error) time.Duration {
	if d, stop := retry.Next(delayProbe, 1, 0, err, time.Time{}, time.Time{}, 0); stop == nil {
		return d
	}
	if re, ok := find(err, isResponse, 0).(*retry.ResponseError); ok {
		return max(re.RetryAfter, 0)
	}
	return 0
}

func isResponse(err error) bool {
	re, ok := err.(*retry.ResponseError)
	return ok && re != nil
}
