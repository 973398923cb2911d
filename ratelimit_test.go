package retry_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
)

// FuzzRateLimit sends any RateLimit and RateLimit-Policy fields to
// CheckResponse: never a panic, never a negative value, delays in whole
// seconds (or the largest Duration), and what the fields say stays the same
// when a valid Retry-After takes precedence, or when the field comes twice
// in two lines.
func FuzzRateLimit(f *testing.F) {
	for _, tt := range sigAnswers {
		f.Add(strings.Join(tt.header.Values("Ratelimit"), ", "), strings.Join(tt.header.Values("Ratelimit-Policy"), ", "))
	}
	f.Add(`"a";r=0;t=10, "b";r=0;t=40, "c";r=5;t=100`, `"a";q=10;w=1, "b";q=100;w=60`)
	f.Add(`"x";r=0;t=999999999999999`, `"x";q=999999999999999;w=999999999999999`)
	f.Fuzz(func(t *testing.T, limits, policies string) {
		header := http.Header{"Ratelimit": {limits}, "Ratelimit-Policy": {policies}}
		re := rlCheck(t, header)
		if re.RetryAfter < 0 || re.Remaining < 0 || re.Quota < 0 || re.QuotaWindow < 0 {
			t.Fatalf("negative value in %+v", re)
		}
		for _, d := range []time.Duration{re.RetryAfter, re.QuotaWindow} {
			if d%time.Second != 0 && d != math.MaxInt64 {
				t.Fatalf("%v is not whole seconds in %+v", d, re)
			}
		}
		switch re.RetryAfterFrom {
		case "":
			if re.RetryAfter != 0 {
				t.Fatalf("a delay from no header: %+v", re)
			}
		case "ratelimit":
			if re.RemainingFrom != "ratelimit" || re.Remaining != 0 {
				t.Fatalf("a delay without an exhausted policy: %+v", re)
			}
		default:
			t.Fatalf("RetryAfterFrom = %q, want \"\" or \"ratelimit\"", re.RetryAfterFrom)
		}
		if re.RemainingFrom != "" && re.RemainingFrom != "ratelimit" {
			t.Fatalf("RemainingFrom = %q, want \"\" or \"ratelimit\"", re.RemainingFrom)
		}
		if re.RemainingFrom == "" && re.Remaining != 0 {
			t.Fatalf("a Remaining from no header: %+v", re)
		}

		// A valid Retry-After comes first, and changes nothing else.
		header.Set("Retry-After", "3")
		ra := rlCheck(t, header)
		if ra.RetryAfter != 3*time.Second || ra.RetryAfterFrom != "retry-after" {
			t.Fatalf("with Retry-After: 3, RetryAfter = %v from %q", ra.RetryAfter, ra.RetryAfterFrom)
		}
		ra.RetryAfter, ra.RetryAfterFrom = re.RetryAfter, re.RetryAfterFrom
		if *ra != *re {
			t.Fatalf("Retry-After changed the rest: %+v, want %+v", ra, re)
		}

		// A valid, non-empty field read twice, in two lines, says the same.
		if re.RemainingFrom == "ratelimit" {
			twice := rlCheck(t, http.Header{"Ratelimit": {limits, limits}, "Ratelimit-Policy": {policies}})
			if *twice != *re {
				t.Fatalf("in two lines: %+v, want %+v", twice, re)
			}
		}
	})
}

func rlCheck(t *testing.T, h http.Header) *retry.ResponseError {
	t.Helper()
	re, ok := retry.CheckResponse(&http.Response{StatusCode: 429, Header: h}).(*retry.ResponseError)
	if !ok {
		t.Fatalf("CheckResponse(429) is not a *ResponseError")
	}
	return re
}

func TestCheckResponseAllocatesOnlyTheError(t *testing.T) {
	headers := []http.Header{
		{},
		{"Retry-After": {"120"}},
		{"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`}, "Ratelimit": {`"burst";r=0;t=30, "daily";r=900`}},
		{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1767225600.5"}},
		{"X-Should-Retry": {"true"}},
	}
	for _, h := range headers {
		resp := &http.Response{StatusCode: 429, Header: h}
		allocs := testing.AllocsPerRun(100, func() { _ = retry.CheckResponse(resp) })
		if allocs != 1 {
			t.Errorf("CheckResponse with %v: %v allocations, want 1 (the ResponseError)", h, allocs)
		}
	}
}
