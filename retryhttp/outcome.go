package retryhttp

import (
	"errors"
	"io"

	"github.com/seed93a044d1/retry"
)

// roundTripError is the error of one attempt's Base.RoundTrip, as the retry
// loop sees it. Its text is the error's own, and errors.Is and errors.As
// reach the error through it; it is there to answer retry.OutcomeUnknown for
// an HTTP exchange, which the error's type alone cannot.
//
// net/http's Transport returns a bare io.EOF when the connection closes
// before any byte of the response arrives, whether the server had read the
// request or not (it drops what it knew about bytes written before it
// returns). An http.Client wraps that in a *url.Error, which tells
// retry.OutcomeUnknown that the EOF ended a round trip; RoundTrip has no
// such wrapper, so without this one a POST the server may have carried out
// would be reported as certainly not done.
type roundTripError struct{ err error }

func (e *roundTripError) Error() string { return e.err.Error() }
func (e *roundTripError) Unwrap() error { return e.err }

// OutcomeUnknown gives retry.OutcomeUnknown's answer for the error, and
// true as well for a connection closed before the response (io.EOF).
func (e *roundTripError) OutcomeUnknown() bool {
	return retry.OutcomeUnknown(e.err) || errors.Is(e.err, io.EOF)
}
