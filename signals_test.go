package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// This file holds the table of server answers: for each status and set of
// headers, what CheckResponse reads from them and what the retry loop then
// decides, through retry.Next, as Do would.

// sigEpoch is the Unix time of a synctest bubble's clock when it starts:
// 2000-01-01 00:00:00 UTC.
const sigEpoch = 946684800

// sigPolicy waits a constant 1s backoff, so that every server delay is
// visible against it, with the default MaxRetryAfter of 5 minutes.
var sigPolicy = retry.Policy{Backoff: retry.Constant(time.Second)}

// sigAnswers is the table of server answers. want holds the ResponseError's
// fields other than the status; wait and stop are retry.Next's answer after
// a first attempt.
var sigAnswers = []struct {
	name   string
	status int
	header http.Header
	want   retry.ResponseError
	wait   time.Duration
	stop   error
}{
	// The status rule alone.
	{name: "503 without headers retries after the backoff", status: 503, wait: time.Second},
	{name: "429 without headers retries after the backoff", status: 429, wait: time.Second},
	{name: "400 without headers stops", status: 400, stop: retry.ErrNotRetryable},
	{name: "501 stops", status: 501, stop: retry.ErrNotRetryable},

	// The Retry-After family, as before.
	{name: "Retry-After seconds", status: 503, header: http.Header{"Retry-After": {"7"}},
		want: retry.ResponseError{RetryAfter: 7 * time.Second, RetryAfterFrom: "retry-after"}, wait: 7 * time.Second},
	{name: "Retry-After date", status: 503, header: http.Header{"Retry-After": {"Sat, 01 Jan 2000 00:00:09 GMT"}},
		want: retry.ResponseError{RetryAfter: 9 * time.Second, RetryAfterFrom: "retry-after"}, wait: 9 * time.Second},
	{name: "Retry-After shorter than the backoff waits the backoff", status: 503, header: http.Header{"Retry-After": {"0"}},
		want: retry.ResponseError{RetryAfterFrom: "retry-after"}, wait: time.Second},
	{name: "retry-after-ms", status: 429, header: http.Header{"Retry-After-Ms": {"1500"}},
		want: retry.ResponseError{RetryAfter: 1500 * time.Millisecond, RetryAfterFrom: "retry-after-ms"}, wait: 1500 * time.Millisecond},
	{name: "x-ms-retry-after-ms", status: 429, header: http.Header{"X-Ms-Retry-After-Ms": {"2500"}},
		want: retry.ResponseError{RetryAfter: 2500 * time.Millisecond, RetryAfterFrom: "x-ms-retry-after-ms"}, wait: 2500 * time.Millisecond},
	{name: "Retry-After above MaxRetryAfter stops", status: 503, header: http.Header{"Retry-After": {"301"}},
		want: retry.ResponseError{RetryAfter: 301 * time.Second, RetryAfterFrom: "retry-after"}, stop: retry.ErrServerDelay},
	{name: "malformed Retry-After is ignored", status: 503, header: http.Header{"Retry-After": {"soon"}}, wait: time.Second},

	// RateLimit and RateLimit-Policy.
	{name: "RateLimit exhausted: t is the delay", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=30`}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   30 * time.Second},
	{name: "RateLimit on a 503 counts too", status: 503,
		header: http.Header{"Ratelimit": {`"default";r=0;t=12`}},
		want:   retry.ResponseError{RetryAfter: 12 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   12 * time.Second},
	{name: "RateLimit several exhausted: the longest t", status: 429,
		header: http.Header{"Ratelimit": {`"a";r=0;t=10, "b";r=0;t=40, "c";r=5;t=100`}},
		want:   retry.ResponseError{RetryAfter: 40 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   40 * time.Second},
	{name: "RateLimit in two lines is one list", status: 429,
		header: http.Header{"Ratelimit": {`"a";r=0;t=10`, `"b";r=0;t=20`}},
		want:   retry.ResponseError{RetryAfter: 20 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   20 * time.Second},
	{name: "RateLimit with quota left gives no delay", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=3;t=30`}},
		want:   retry.ResponseError{Remaining: 3, RemainingFrom: "ratelimit"}, wait: time.Second},
	{name: "RateLimit exhausted without t gives no delay", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0`}},
		want:   retry.ResponseError{RemainingFrom: "ratelimit"}, wait: time.Second},
	{name: "RateLimit t of 0", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=0`}},
		want:   retry.ResponseError{RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"}, wait: time.Second},
	{name: "RateLimit above MaxRetryAfter stops", status: 429,
		header: http.Header{"Ratelimit": {`"daily";r=0;t=3600`}},
		want:   retry.ResponseError{RetryAfter: time.Hour, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		stop:   retry.ErrServerDelay},
	{name: "RateLimit largest t saturates and stops", status: 429,
		header: http.Header{"Ratelimit": {`"x";r=0;t=999999999999999`}},
		want:   retry.ResponseError{RetryAfter: raMaxDuration, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		stop:   retry.ErrServerDelay},
	{name: "RateLimit unknown parameters are allowed", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=30;pk=:cHsdsRa894==:;acme-burst=?1;acme-note="x, y"`}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   30 * time.Second},
	{name: "RateLimit repeated parameter: the last counts", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=5;t=30;r=0`}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   30 * time.Second},
	{name: "RateLimit with its policy", status: 429,
		header: http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`},
			"Ratelimit":        {`"burst";r=0;t=30, "daily";r=900;t=50000`},
		},
		want: retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit",
			Quota: 100, QuotaWindow: time.Minute},
		wait: 30 * time.Second},
	{name: "RateLimit-Policy alone: the lowest rate", status: 503,
		header: http.Header{"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400, "nowindow";q=1`}},
		want:   retry.ResponseError{Quota: 1000, QuotaWindow: 24 * time.Hour}, wait: time.Second},
	{name: "RateLimit-Policy without the named policy", status: 429,
		header: http.Header{
			"Ratelimit-Policy": {`"other";q=100;w=60`},
			"Ratelimit":        {`"burst";r=2`},
		},
		want: retry.ResponseError{Remaining: 2, RemainingFrom: "ratelimit"}, wait: time.Second},

	// Malformed RateLimit fields are ignored whole.
	{name: "RateLimit negative r is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"a";r=0;t=30, "b";r=-1`}}, wait: time.Second},
	{name: "RateLimit without r is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"default";t=30`}}, wait: time.Second},
	{name: "RateLimit decimal r is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0.0;t=30`}}, wait: time.Second},
	{name: "RateLimit decimal t is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=1.5`}}, wait: time.Second},
	{name: "RateLimit token name is ignored", status: 429,
		header: http.Header{"Ratelimit": {`default;r=0;t=30`}}, wait: time.Second},
	{name: "RateLimit inner list is ignored", status: 429,
		header: http.Header{"Ratelimit": {`("a" "b");r=0;t=30`}}, wait: time.Second},
	{name: "RateLimit 16 digits is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"x";r=0;t=1000000000000000`}}, wait: time.Second},
	{name: "RateLimit trailing comma is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=30,`}}, wait: time.Second},
	{name: "RateLimit older draft syntax is ignored", status: 429,
		header: http.Header{"Ratelimit": {`limit=100, remaining=0, reset=30`}}, wait: time.Second},
	{name: "RateLimit with a bad second line is ignored", status: 429,
		header: http.Header{"Ratelimit": {`"a";r=0;t=30`, `"b";r=x`}}, wait: time.Second},
	{name: "RateLimit-Policy zero window is ignored", status: 429,
		header: http.Header{"Ratelimit-Policy": {`"p";q=10;w=0`}, "Ratelimit": {`"p";r=0;t=5`}},
		want:   retry.ResponseError{RetryAfter: 5 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   5 * time.Second},
	{name: "RateLimit-Policy without q is ignored", status: 503,
		header: http.Header{"Ratelimit-Policy": {`"p";w=60`}}, wait: time.Second},

	// X-RateLimit-Reset and X-RateLimit-Remaining.
	{name: "X-RateLimit-Reset seconds on a 429", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {"30"}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "x-ratelimit-reset"}, wait: 30 * time.Second},
	{name: "X-RateLimit-Reset with Remaining 0", status: 503,
		header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}},
		want: retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "x-ratelimit-reset",
			RemainingFrom: "x-ratelimit-remaining"}, wait: 30 * time.Second},
	{name: "X-RateLimit-Reset on a 503 without Remaining is not the reason", status: 503,
		header: http.Header{"X-Ratelimit-Reset": {"30"}}, wait: time.Second},
	{name: "X-RateLimit-Reset with quota left is not the reason", status: 429,
		header: http.Header{"X-Ratelimit-Remaining": {"5"}, "X-Ratelimit-Reset": {"30"}},
		want:   retry.ResponseError{Remaining: 5, RemainingFrom: "x-ratelimit-remaining"}, wait: time.Second},
	{name: "X-RateLimit-Reset Unix time", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {fmt.Sprint(sigEpoch + 45)}},
		want:   retry.ResponseError{RetryAfter: 45 * time.Second, RetryAfterFrom: "x-ratelimit-reset"}, wait: 45 * time.Second},
	{name: "X-RateLimit-Reset Unix time with a fraction", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {fmt.Sprint(sigEpoch+2) + ".250"}},
		want:   retry.ResponseError{RetryAfter: 2250 * time.Millisecond, RetryAfterFrom: "x-ratelimit-reset"}, wait: 2250 * time.Millisecond},
	{name: "X-RateLimit-Reset Unix time in the past", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {fmt.Sprint(sigEpoch - 600)}},
		want:   retry.ResponseError{RetryAfterFrom: "x-ratelimit-reset"}, wait: time.Second},
	{name: "X-RateLimit-Reset Unix time an hour ahead stops", status: 429,
		header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(sigEpoch + 3600)}},
		want: retry.ResponseError{RetryAfter: time.Hour, RetryAfterFrom: "x-ratelimit-reset",
			RemainingFrom: "x-ratelimit-remaining"}, stop: retry.ErrServerDelay},
	{name: "X-RateLimit-Reset Unix time in milliseconds", status: 429,
		header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(sigEpoch*1000 + 2500)}},
		want: retry.ResponseError{RetryAfter: 2500 * time.Millisecond, RetryAfterFrom: "x-ratelimit-reset",
			RemainingFrom: "x-ratelimit-remaining"}, wait: 2500 * time.Millisecond},
	{name: "X-RateLimit-Reset Unix time in milliseconds in the past", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {fmt.Sprint(sigEpoch*1000 - 1)}},
		want:   retry.ResponseError{RetryAfterFrom: "x-ratelimit-reset"}, wait: time.Second},
	{name: "X-RateLimit-Reset fraction of seconds", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {"1.5"}},
		want:   retry.ResponseError{RetryAfter: 1500 * time.Millisecond, RetryAfterFrom: "x-ratelimit-reset"}, wait: 1500 * time.Millisecond},
	{name: "X-RateLimit-Reset malformed is ignored", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {"30s"}}, wait: time.Second},
	{name: "X-RateLimit-Reset negative is ignored", status: 429,
		header: http.Header{"X-Ratelimit-Reset": {"-30"}}, wait: time.Second},
	{name: "X-RateLimit-Remaining malformed counts as absent: on a 429 the reset counts", status: 429,
		header: http.Header{"X-Ratelimit-Remaining": {"none"}, "X-Ratelimit-Reset": {"30"}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "x-ratelimit-reset"}, wait: 30 * time.Second},
	{name: "X-RateLimit-Remaining malformed counts as absent: on a 503 the reset does not", status: 503,
		header: http.Header{"X-Ratelimit-Remaining": {"-1"}, "X-Ratelimit-Reset": {"30"}}, wait: time.Second},

	// Precedence.
	{name: "Retry-After before RateLimit", status: 429,
		header: http.Header{"Retry-After": {"5"}, "Ratelimit": {`"default";r=0;t=30`}},
		want:   retry.ResponseError{RetryAfter: 5 * time.Second, RetryAfterFrom: "retry-after", RemainingFrom: "ratelimit"},
		wait:   5 * time.Second},
	{name: "Retry-After saves a call RateLimit alone would stop", status: 429,
		header: http.Header{"Retry-After": {"2"}, "Ratelimit": {`"daily";r=0;t=3600`}},
		want:   retry.ResponseError{RetryAfter: 2 * time.Second, RetryAfterFrom: "retry-after", RemainingFrom: "ratelimit"},
		wait:   2 * time.Second},
	{name: "retry-after-ms of 0 is valid and comes first", status: 429,
		header: http.Header{"Retry-After-Ms": {"0"}, "Ratelimit": {`"default";r=0;t=30`}},
		want:   retry.ResponseError{RetryAfterFrom: "retry-after-ms", RemainingFrom: "ratelimit"}, wait: time.Second},
	{name: "malformed Retry-After leaves it to RateLimit", status: 429,
		header: http.Header{"Retry-After": {"soon"}, "Ratelimit": {`"default";r=0;t=30`}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   30 * time.Second},
	{name: "RateLimit before X-RateLimit-Reset", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=30`}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"40"}},
		want:   retry.ResponseError{RetryAfter: 30 * time.Second, RetryAfterFrom: "ratelimit", RemainingFrom: "ratelimit"},
		wait:   30 * time.Second},
	{name: "malformed RateLimit leaves it to X-RateLimit-Reset", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=0;t=-30`}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"20"}},
		want: retry.ResponseError{RetryAfter: 20 * time.Second, RetryAfterFrom: "x-ratelimit-reset",
			RemainingFrom: "x-ratelimit-remaining"}, wait: 20 * time.Second},
	{name: "RateLimit with quota left leaves it to X-RateLimit-Reset", status: 429,
		header: http.Header{"Ratelimit": {`"default";r=4`}, "X-Ratelimit-Reset": {"20"}},
		want:   retry.ResponseError{RetryAfter: 20 * time.Second, RetryAfterFrom: "x-ratelimit-reset", Remaining: 4, RemainingFrom: "ratelimit"},
		wait:   20 * time.Second},
	{name: "every header: retry-after-ms wins", status: 429,
		header: http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"3"}, "Ratelimit": {`"d";r=0;t=30`},
			"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"40"}},
		want: retry.ResponseError{RetryAfter: 1500 * time.Millisecond, RetryAfterFrom: "retry-after-ms", RemainingFrom: "ratelimit"},
		wait: 1500 * time.Millisecond},
	{name: "every header malformed: the backoff alone", status: 429,
		header: http.Header{"Retry-After-Ms": {"1.5"}, "X-Ms-Retry-After-Ms": {"-1"}, "Retry-After": {"soon"},
			"Ratelimit": {`"d";r=0;t=x`}, "Ratelimit-Policy": {`"d";q=-1`}, "X-Ratelimit-Remaining": {"zero"},
			"X-Ratelimit-Reset": {"later"}, "X-Should-Retry": {"perhaps"}},
		wait: time.Second},

	// x-should-retry overrides the status rule both ways.
	{name: "x-should-retry true retries a 400", status: 400, header: http.Header{"X-Should-Retry": {"true"}},
		want: retry.ResponseError{ShouldRetry: retry.Retry}, wait: time.Second},
	{name: "x-should-retry true retries a 501", status: 501, header: http.Header{"X-Should-Retry": {"true"}},
		want: retry.ResponseError{ShouldRetry: retry.Retry}, wait: time.Second},
	{name: "x-should-retry TRUE in any case", status: 404, header: http.Header{"X-Should-Retry": {" TRUE "}},
		want: retry.ResponseError{ShouldRetry: retry.Retry}, wait: time.Second},
	{name: "x-should-retry false stops a 503", status: 503, header: http.Header{"X-Should-Retry": {"false"}},
		want: retry.ResponseError{ShouldRetry: retry.Stop}, stop: retry.ErrNotRetryable},
	{name: "x-should-retry false stops a 429 with Retry-After", status: 429,
		header: http.Header{"X-Should-Retry": {"False"}, "Retry-After": {"5"}},
		want:   retry.ResponseError{ShouldRetry: retry.Stop, RetryAfter: 5 * time.Second, RetryAfterFrom: "retry-after"},
		stop:   retry.ErrNotRetryable},
	{name: "x-should-retry true with a RateLimit delay", status: 400,
		header: http.Header{"X-Should-Retry": {"true"}, "Ratelimit": {`"d";r=0;t=10`}},
		want: retry.ResponseError{ShouldRetry: retry.Retry, RetryAfter: 10 * time.Second, RetryAfterFrom: "ratelimit",
			RemainingFrom: "ratelimit"}, wait: 10 * time.Second},
	{name: "x-should-retry true does not lift the ceiling", status: 429,
		header: http.Header{"X-Should-Retry": {"true"}, "Retry-After": {"600"}},
		want:   retry.ResponseError{ShouldRetry: retry.Retry, RetryAfter: 10 * time.Minute, RetryAfterFrom: "retry-after"},
		stop:   retry.ErrServerDelay},
	{name: "x-should-retry malformed is ignored: 400 stops", status: 400, header: http.Header{"X-Should-Retry": {"yes"}},
		stop: retry.ErrNotRetryable},
	{name: "x-should-retry malformed is ignored: 503 retries", status: 503, header: http.Header{"X-Should-Retry": {"1"}},
		wait: time.Second},
	{name: "x-should-retry true cannot rescue a status outside 100-599", status: 600,
		header: http.Header{"X-Should-Retry": {"true"}},
		want:   retry.ResponseError{ShouldRetry: retry.Retry}, stop: retry.ErrNotRetryable},
}

func TestServerAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range sigAnswers {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				now := time.Now()
				require.Equal(t, int64(sigEpoch), now.Unix(), "the bubble's clock starts at 2000-01-01")
				status := fmt.Sprintf("%d %s", tt.status, http.StatusText(tt.status))
				err := retry.CheckResponse(&http.Response{StatusCode: tt.status, Status: status, Header: tt.header})
				var re *retry.ResponseError
				require.ErrorAs(t, err, &re)
				want := tt.want
				want.StatusCode, want.Status = tt.status, status
				assert.Equal(t, &want, re)

				wait, stop := retry.Next(sigPolicy, 1, 0, err, now, time.Time{}, 0.5)
				if tt.stop != nil {
					assert.ErrorIs(t, stop, tt.stop, "Next stop = %v, want %v", stop, tt.stop)
					return
				}
				assert.NoError(t, stop)
				assert.Equal(t, tt.wait, wait, "Next wait = %v, want %v", wait, tt.wait)
				assert.GreaterOrEqual(t, wait, time.Second, "a wait never shorter than the backoff")
			})
		})
	}
}

// TestServerAnswersDo runs a few answers through Do itself, whose elapsed
// time in the bubble is exact: the first attempt gets the answer, the
// second succeeds.
func TestServerAnswersDo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		header http.Header
		want   time.Duration
	}{
		{name: "RateLimit t", status: 429, header: http.Header{"Ratelimit": {`"a";r=0;t=10, "b";r=0;t=25`}}, want: 25 * time.Second},
		{name: "X-RateLimit-Reset Unix time", status: 503,
			header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(sigEpoch + 40)}}, want: 40 * time.Second},
		{name: "x-should-retry true on a 400", status: 400, header: http.Header{"X-Should-Retry": {"true"}}, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				calls := 0
				err := retry.Do(t.Context(), func(context.Context) error {
					calls++
					if calls == 1 {
						return retry.CheckResponse(&http.Response{StatusCode: tt.status, Header: tt.header})
					}
					return nil
				}, sigPolicy)
				require.NoError(t, err)
				assert.Equal(t, 2, calls)
				assert.Equal(t, tt.want, time.Since(start), "elapsed %v, want %v", time.Since(start), tt.want)
			})
		})
	}
}

// sigUnrepeatable is an error that says its attempt must not be repeated,
// as retryhttp's and retrygrpc's errors do for a request that is not
// idempotent.
type sigUnrepeatable struct{ err error }

func (e *sigUnrepeatable) Error() string       { return e.err.Error() }
func (e *sigUnrepeatable) Unwrap() error       { return e.err }
func (e *sigUnrepeatable) Unrepeatable() error { return retry.ErrNotIdempotent }

func TestShouldRetryNeverMakesAnUnrepeatableCallRetryable(t *testing.T) {
	t.Parallel()
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error {
		calls++
		return &sigUnrepeatable{retry.CheckResponse(&http.Response{StatusCode: 400,
			Header: http.Header{"X-Should-Retry": {"true"}}})}
	}, retry.Policy{Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrNotIdempotent)
	assert.Equal(t, 1, calls, "attempts = %d, want 1", calls)
}

func TestShouldRetryDoesNotRetryAnInnerLoop(t *testing.T) {
	t.Parallel()
	inner := 0
	answer := &http.Response{StatusCode: 503, Header: http.Header{"X-Should-Retry": {"true"}}}
	err := retry.Do(t.Context(), func(ctx context.Context) error {
		return retry.Do(ctx, func(context.Context) error {
			inner++
			return retry.CheckResponse(answer)
		}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
	}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrAlreadyRetried)
	assert.Equal(t, 3, inner, "inner attempts = %d, want 3: the outer loop must not multiply them", inner)
}

// TestShouldRetryEndToEnd sends real requests through retryhttp to a real
// server on loopback: x-should-retry decides for a GET both ways, and never
// makes a POST without an idempotency key retryable.
func TestShouldRetryEndToEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		method   string
		status   int
		should   string
		requests int32
		want     int // the status the client gets
	}{
		{name: "true retries a GET's 400", method: http.MethodGet, status: 400, should: "true", requests: 2, want: 200},
		{name: "false stops a GET's 503", method: http.MethodGet, status: 503, should: "false", requests: 1, want: 503},
		{name: "true does not retry a POST", method: http.MethodPost, status: 503, should: "true", requests: 1, want: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if requests.Add(1) == 1 {
					w.Header().Set("X-Should-Retry", tt.should)
					w.WriteHeader(tt.status)
					return
				}
				_, _ = io.WriteString(w, "ok")
			}))
			defer srv.Close()
			client := retryhttp.NewClient(srv.Client(), retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL, strings.NewReader("body"))
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, tt.want, resp.StatusCode)
			assert.Equal(t, tt.requests, requests.Load(), "requests = %d, want %d", requests.Load(), tt.requests)
		})
	}
}

// TestServerDelayEndToEnd serves rate limit answers from a real server on
// loopback to a real http.Client inside retry.Do, with short delays: the
// retry comes no earlier than the server asked. Only the lower bound is
// checked, which no machine's speed can break.
func TestServerDelayEndToEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string]string
		least  time.Duration
	}{
		{name: "RateLimit", header: map[string]string{"RateLimit": `"default";r=0;t=0`}, least: 0},
		{name: "X-RateLimit-Reset fraction", header: map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0.05"},
			least: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var arrivals []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				arrivals = append(arrivals, time.Now())
				n := len(arrivals)
				mu.Unlock()
				if n == 1 {
					for k, v := range tt.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				_, _ = io.WriteString(w, "ok")
			}))
			defer srv.Close()

			var seen *retry.ResponseError
			err := retry.Do(t.Context(), func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				if err != nil {
					return retry.Permanent(err)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if err := retry.CheckResponse(resp); err != nil {
					errors.As(err, &seen)
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				return err
			}, retry.Policy{Backoff: retry.Constant(0)})
			require.NoError(t, err)
			require.NotNil(t, seen)
			assert.Equal(t, tt.least, seen.RetryAfter, "RetryAfter = %v, want %v", seen.RetryAfter, tt.least)
			assert.Equal(t, int64(0), seen.Remaining)
			assert.NotEmpty(t, seen.RemainingFrom)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, arrivals, 2)
			gap := arrivals[1].Sub(arrivals[0])
			assert.GreaterOrEqual(t, gap, tt.least, "the retry came %v after the first request, want at least %v", gap, tt.least)
		})
	}
}

// FuzzCheckResponse sends any values of every header CheckResponse reads,
// with any error status, and checks the judging rules of the server's
// signals: never a panic or a negative delay, a wait never shorter than the
// backoff, and with a valid Retry-After the other rate limit headers, valid
// or not, change nothing about the decision: they can neither shorten the
// wait nor stop a call that Retry-After alone would retry.
func FuzzCheckResponse(f *testing.F) {
	f.Add(uint16(429), "", "", "", `"d";r=0;t=30`, `"d";q=10;w=60`, "40", "0", "")
	f.Add(uint16(503), "1.5", "-1", "soon", `"d";r=0;t=x`, `"d";q=-1`, "later", "zero", "perhaps")
	f.Add(uint16(400), "", "", "", "", "", "", "", "true")
	f.Add(uint16(503), "", "", "", `"d";r=0;t=3600`, "", "999999999999", "0", "false")
	for _, tt := range sigAnswers {
		h := tt.header
		f.Add(uint16(tt.status), h.Get("Retry-After-Ms"), h.Get("X-Ms-Retry-After-Ms"), h.Get("Retry-After"),
			h.Get("Ratelimit"), h.Get("Ratelimit-Policy"), h.Get("X-Ratelimit-Reset"), h.Get("X-Ratelimit-Remaining"),
			h.Get("X-Should-Retry"))
	}
	f.Fuzz(func(t *testing.T, code uint16, ms, xms, ra, rl, rlp, reset, remaining, should string) {
		status := 400 + int(code%200)
		now := time.Now()
		header := http.Header{
			"Retry-After-Ms": {ms}, "X-Ms-Retry-After-Ms": {xms}, "Retry-After": {ra},
			"Ratelimit": {rl}, "Ratelimit-Policy": {rlp},
			"X-Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {remaining}, "X-Should-Retry": {should},
		}
		err := retry.CheckResponse(&http.Response{StatusCode: status, Header: header})
		var re *retry.ResponseError
		if !errors.As(err, &re) {
			t.Fatalf("CheckResponse(%d) = %v, want a *ResponseError", status, err)
		}
		if re.RetryAfter < 0 || re.Remaining < 0 || re.Quota < 0 || re.QuotaWindow < 0 {
			t.Fatalf("negative value in %+v", re)
		}
		if wait, stop := retry.Next(sigPolicy, 1, 0, err, now, time.Time{}, 0.5); stop == nil && wait < time.Second {
			t.Fatalf("wait %v, shorter than the backoff of 1s: %+v", wait, re)
		}

		// Retry-After alone, then with every rate limit header beside it.
		alone := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"7"}}}
		wantWait, wantStop := retry.Next(sigPolicy, 1, 0, retry.CheckResponse(alone), now, time.Time{}, 0.5)
		both := &http.Response{StatusCode: status, Header: http.Header{
			"Retry-After": {"7"}, "Ratelimit": {rl}, "Ratelimit-Policy": {rlp},
			"X-Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {remaining},
		}}
		wait, stop := retry.Next(sigPolicy, 1, 0, retry.CheckResponse(both), now, time.Time{}, 0.5)
		if wait != wantWait || !errors.Is(stop, wantStop) {
			t.Fatalf("with the rate limit headers: %v, %v; with Retry-After alone: %v, %v", wait, stop, wantWait, wantStop)
		}
	})
}

// A provider that rate limits says so in its headers; the ResponseError
// keeps what they say, and the retry loop waits until the exhausted policy
// is restored.
func ExampleResponseError_rateLimit() {
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header: http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`},
			"Ratelimit":        {`"burst";r=0;t=30, "daily";r=850;t=40000`},
		},
	}
	var re *retry.ResponseError
	if errors.As(retry.CheckResponse(resp), &re) {
		fmt.Println("wait", re.RetryAfter, "set by", re.RetryAfterFrom)
		fmt.Println("left", re.Remaining, "of", re.Quota, "per", re.QuotaWindow)
		fmt.Println("retry:", retry.DefaultClassifier(re))
	}
	// Output:
	// wait 30s set by ratelimit
	// left 0 of 100 per 1m0s
	// retry: retry
}

// A server can say for itself whether a failure is worth retrying, whatever
// its status: x-should-retry overrides the status rule both ways.
func ExampleResponseError_RetryDecision() {
	for _, resp := range []*http.Response{
		{StatusCode: http.StatusConflict, Header: http.Header{"X-Should-Retry": {"true"}}},
		{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"X-Should-Retry": {"false"}}},
		{StatusCode: http.StatusServiceUnavailable},
	} {
		fmt.Println(resp.StatusCode, retry.DefaultClassifier(retry.CheckResponse(resp)))
	}
	// Output:
	// 409 retry
	// 503 stop
	// 503 retry
}
