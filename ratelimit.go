package retry

import (
	"math/bits"
	"net/http"
	"time"
)

// This file reads the IETF RateLimit and RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers-11). Both are Structured Field Lists
// (see structured.go) of items named by a String:
//
//	RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
//	RateLimit: "burst";r=0;t=30, "daily";r=900;t=50000
//
// A RateLimit item says how much quota is left under a policy (r, required)
// and in how many seconds it is restored (t, optional); a RateLimit-Policy
// item gives a policy's quota (q, required) and its window in seconds (w,
// optional, at least 1). Other parameters (pk, qu, a vendor's) are allowed
// and not read. The draft says a malformed field must be ignored, so one is
// ignored whole: not a valid List, a member that is not a String item, or a
// defined parameter missing or of the wrong type or range.

// rateLimit is what a response's RateLimit and RateLimit-Policy fields say.
type rateLimit struct {
	delay   time.Duration // the longest t among the policies with r=0
	delayed bool          // some policy with r=0 gave a t

	remaining    int64 // the smallest r
	hasRemaining bool

	quota     int64         // q of the policy that applies (see readRateLimit)
	window    time.Duration // its w; 0 if it gave none
	hasPolicy bool
}

// readRateLimit reads the RateLimit and RateLimit-Policy fields of h.
//
// The policy whose quota is left is the RateLimit item with the smallest r,
// the one with the longest t among equals (so, when several are exhausted,
// the one that sets the delay). Its quota and window come from the
// RateLimit-Policy item of the same name. Without a valid RateLimit field
// to name one, they come from the policy of the lowest rate, q/w, among
// those that give a window.
func readRateLimit(h http.Header) rateLimit {
	var rl rateLimit
	name, named := rl.readLimits(h["Ratelimit"])
	rl.readPolicies(h["Ratelimit-Policy"], name, named)
	return rl
}

// readLimits reads the RateLimit field, and returns the name of the policy
// whose quota is left, if the field is valid and not empty.
func (rl *rateLimit) readLimits(lines []string) (name string, named bool) {
	if len(lines) == 0 {
		return "", false
	}
	var (
		delay     time.Duration
		delayed   bool
		remaining int64
		longest   int64 = -1 // the t of the item named, -1 if it has none
	)
	l := newSFList(lines, [2]string{"r", "t"})
	for {
		m, ok := l.next()
		if !ok {
			break
		}
		r, okR := paramInt(m.params[0], 0, true)
		t, okT := paramInt(m.params[1], 0, false)
		if m.value.kind != sfString || !okR || !okT {
			return "", false
		}
		if r == 0 && t >= 0 {
			delay, delayed = max(delay, saturatingMul(t, time.Second)), true
		}
		if !named || r < remaining || (r == remaining && t > longest) {
			name, named, remaining, longest = m.value.text, true, r, t
		}
	}
	if !l.valid() {
		return "", false
	}
	rl.delay, rl.delayed = delay, delayed
	rl.remaining, rl.hasRemaining = remaining, named
	return name, named
}

// readPolicies reads the RateLimit-Policy field, and keeps the policy named
// name if named, else the one of the lowest rate that gives a window.
func (rl *rateLimit) readPolicies(lines []string, name string, named bool) {
	if len(lines) == 0 {
		return
	}
	var (
		quota  int64
		window int64
		found  bool
	)
	l := newSFList(lines, [2]string{"q", "w"})
	for {
		m, ok := l.next()
		if !ok {
			break
		}
		q, okQ := paramInt(m.params[0], 0, true)
		w, okW := paramInt(m.params[1], 1, false)
		if m.value.kind != sfString || !okQ || !okW {
			return
		}
		switch {
		case found && named:
			// the first policy of that name stands
		case named && m.value.text == name,
			!named && w > 0 && (!found || slower(q, w, quota, window)):
			quota, window, found = q, max(w, 0), true
		}
	}
	if !l.valid() || !found {
		return
	}
	rl.quota, rl.window, rl.hasPolicy = quota, saturatingMul(window, time.Second), true
}

// slower reports whether q1 per w1 is a lower rate than q2 per w2, all of
// them non-negative, exactly: the products are compared in 128 bits.
func slower(q1, w1, q2, w2 int64) bool {
	hi1, lo1 := bits.Mul64(uint64(q1), uint64(w2))
	hi2, lo2 := bits.Mul64(uint64(q2), uint64(w1))
	return hi1 < hi2 || (hi1 == hi2 && lo1 < lo2)
}

// paramInt returns the value of p, which must be an Integer of at least
// min; -1 and true when it is absent and not required.
func paramInt(p sfParam, min int64, required bool) (int64, bool) {
	if !p.found {
		return -1, !required
	}
	return p.integer(min)
}
