// Package breaker is a [retry.Breaker] made of a circuit breaker of
// github.com/sony/gobreaker/v2, for a service that already tunes its
// breakers with gobreaker's Settings (ReadyToTrip, Interval, BucketPeriod,
// Timeout, MaxRequests) and wants the retry loop to honour them:
//
//	b := breaker.New(gobreaker.Settings{Name: "prices", Timeout: 30 * time.Second})
//	policy := retry.Policy{Breaker: b}
//
// Set as Policy.Breaker, the breaker is asked before every attempt (the
// first, each retry, each hedge) and told how each ended, and while it is
// open a call stops before its first attempt, or at the retry that would be
// refused, with a Reason for which errors.Is(err, retry.ErrBreakerOpen)
// holds and whose Until() says when the breaker turns half-open. A loop
// around that call (an outer retry.Do, a retrying client above it) stops at
// once with the same reason. [retry.CircuitBreaker] does the same with no
// dependency; use this one to keep gobreaker's settings and its
// OnStateChange.
//
// Each attempt, not each call, goes through the breaker, so that the
// breaker counts what the dependency does: a call that fails twice and then
// succeeds is two failures and a success.
//
// # What counts
//
// The loop tells the breaker of three kinds of end: nil for a success, the
// failure itself when the policy's classifier would retry it, and an error
// that Is context.Canceled when the attempt says nothing of the
// dependency's health (a 404 the classifier stops on, a hedge cut by the
// winner, the caller's own cancel). gobreaker's counts have a third kind
// too: an error that Settings.IsExcluded accepts is neither a success nor a
// failure, and in the half-open state frees its place for another trial
// request. [New] makes every error that Is context.Canceled excluded, before
// asking an IsExcluded of the caller's. Counting such an end as a failure
// would open the breaker on a healthy dependency that answers 404s; as a
// success, it would close a half-open breaker on no evidence.
package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/seed93a044d1/retry"
)

// Breaker is a [retry.Breaker] that asks a gobreaker TwoStepCircuitBreaker.
// Make one with [New]; the zero value is not usable. A Breaker is safe for
// concurrent use by any number of goroutines.
//
// gobreaker reads the clock itself, so the times the loop gives Allow and
// Until are used only to say when the breaker may let an attempt through
// again; inside a testing/synctest bubble both read the same fake clock.
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	timeout time.Duration

	// halfOpen is when the open breaker turns half-open, in Unix
	// nanoseconds; 0 while it is not open. OnStateChange sets it:
	// gobreaker says when it opened there and nowhere else.
	halfOpen atomic.Int64
}

var _ retry.Breaker = (*Breaker)(nil)

// New returns a Breaker over a new gobreaker TwoStepCircuitBreaker made
// with st, whose IsExcluded also excludes every error that Is
// context.Canceled (see the package documentation) and whose OnStateChange
// also records when the breaker opened, to know when its Timeout ends. st's
// own IsExcluded and OnStateChange, if set, are still called. The breaker
// is made here rather than taken ready-made because gobreaker reveals when
// it opened only through OnStateChange.
func New(st gobreaker.Settings) *Breaker {
	b := &Breaker{timeout: st.Timeout}
	if b.timeout <= 0 {
		b.timeout = 60 * time.Second // gobreaker's default
	}
	excluded, changed := st.IsExcluded, st.OnStateChange
	st.IsExcluded = func(err error) bool {
		return errors.Is(err, context.Canceled) || (excluded != nil && excluded(err))
	}
	st.OnStateChange = func(name string, from, to gobreaker.State) {
		// gobreaker calls this as it opens, holding its lock, and ends the
		// open state once the clock is past its own reading plus Timeout:
		// this reading is no earlier, and the nanosecond makes it past, so
		// that Until is never early.
		if to == gobreaker.StateOpen {
			b.halfOpen.Store(time.Now().Add(b.timeout + time.Nanosecond).UnixNano())
		} else {
			b.halfOpen.Store(0)
		}
		if changed != nil {
			changed(name, from, to)
		}
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	return b
}

// Allow lets an attempt through, and returns the func that tells gobreaker
// how it ended; or refuses it, and returns when the breaker may let one
// through again: the end of Timeout when it is open, and a second later
// (or Timeout, if shorter) when it is half-open with every trial request
// already out, as they may have answered by then.
func (b *Breaker) Allow(now time.Time) (done func(end time.Time, err error), until time.Time) {
	report, err := b.cb.Allow()
	switch {
	case err == nil:
		return func(_ time.Time, err error) { report(err) }, time.Time{}
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, now.Add(min(b.timeout, time.Second))
	}
	if u := b.Until(now); !u.IsZero() {
		return nil, u
	}
	return nil, now // open, but its Timeout has just ended: ask again
}

// Until returns when the open breaker turns half-open, if that is after t;
// zero otherwise, and while it is closed or half-open. It takes nothing
// from the breaker.
func (b *Breaker) Until(t time.Time) time.Time {
	n := b.halfOpen.Load()
	if n == 0 {
		return time.Time{}
	}
	if u := time.Unix(0, n); u.After(t) {
		return u
	}
	return time.Time{}
}

// State returns gobreaker's state of the breaker.
func (b *Breaker) State() gobreaker.State { return b.cb.State() }

// Counts returns gobreaker's counts of the breaker.
func (b *Breaker) Counts() gobreaker.Counts { return b.cb.Counts() }
