// Package breaker puts a circuit breaker (github.com/sony/gobreaker/v2) in
// front of each attempt of a retried call, so that once the dependency has
// failed often enough the call stops at once instead of spending its
// attempts, its budget and its caller's time on a dependency known to be
// down.
//
// The breaker's refusal must stop the loop, not be retried: to the default
// classifier, gobreaker.ErrOpenState is an error like any other (Unknown),
// and Unknown retries. [Open] says it for itself, through the retry
// package's Unrepeatable protocol: an error with a method Unrepeatable()
// error stops the call with the reason it returns. So the call stops with
// the breaker's own error as its Reason, errors.Is(err,
// gobreaker.ErrOpenState) holds, and a retry loop around this one (an outer
// retry.Do, a retrying client above it) stops at once with the same reason
// instead of retrying the refusal.
//
// Each attempt, not each call, goes through the breaker, so that the
// breaker counts what the dependency does: a call that fails twice and then
// succeeds is two failures and a success.
package breaker

import (
	"context"
	"errors"

	"github.com/sony/gobreaker/v2"
)

// Open is the error of an attempt that the breaker refused to make: its
// state is open, or half-open with its trial requests already running. Err is
// gobreaker.ErrOpenState or gobreaker.ErrTooManyRequests.
type Open struct {
	Err error
}

// Error returns the breaker's message.
func (e Open) Error() string { return e.Err.Error() }

// Unwrap lets errors.Is reach the breaker's error.
func (e Open) Unwrap() error { return e.Err }

// Unrepeatable returns the breaker's error: the reason retry.Do stops with.
// Retrying a refusal is pointless until the breaker's timeout ends, and a
// loop that did would only wait and be refused again.
func (e Open) Unrepeatable() error { return e.Err }

// Attempt runs one attempt of fn through cb, and turns the breaker's
// refusal into [Open]. Call it inside the function given to retry.Do or
// retry.DoValue.
func Attempt[T any](ctx context.Context, cb *gobreaker.CircuitBreaker[T], fn func(context.Context) (T, error)) (T, error) {
	v, err := cb.Execute(func() (T, error) { return fn(ctx) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return v, Open{Err: err}
	}
	return v, err
}

// Settings returns gobreaker settings that count a failure for an attempt
// that failed, but not for one whose context was cancelled: the caller gave
// up, the dependency did not fail.
func Settings(name string, readyToTrip func(gobreaker.Counts) bool) gobreaker.Settings {
	return gobreaker.Settings{
		Name:        name,
		ReadyToTrip: readyToTrip,
		IsExcluded:  func(err error) bool { return errors.Is(err, context.Canceled) },
	}
}
