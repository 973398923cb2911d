package retry

import (
	"context"
	"time"
)

// bounds is what one attempt holds of the Policy's bounds on load: its
// Concurrency slot and its Breaker's leave, each given back exactly once,
// by settle, when the attempt has ended.
type bounds struct {
	release func(time.Duration, error)
	done    func(time.Time, error)

	// early says that what b holds needs no reading of the clock at the
	// end of a success: a ConcurrencyLimit's slot, which ignores the
	// duration, and a CircuitBreaker's leave, which counts a success at the
	// latest time it knows when given an earlier one. The loop then gives
	// the attempt's start for its end, and spares a success the cost of a
	// clock reading (as much as the rest of a first-try call, on some
	// machines).
	early bool
}

// held reports whether b holds anything to give back.
func (b *bounds) held() bool { return b.release != nil || b.done != nil }

// settle gives back what b holds, for an attempt that ran from began to
// end, with health its end's news (see health), and empties b, so that
// nothing is given back twice.
func (b *bounds) settle(began, end time.Time, news error) {
	// The Breaker first: a waiter that the slot goes to is then let
	// through, or not, knowing what this attempt said.
	if done := b.done; done != nil {
		b.done = nil
		done(end, news)
	}
	if rel := b.release; rel != nil {
		b.release = nil
		rel(max(end.Sub(began), 0), news)
	}
}

// health is what an attempt that ended with err says of the dependency, as
// a Concurrency's release and a Breaker's done receive it: nil for a
// success, err itself when it is a failure that the policy would retry
// (counts), and otherwise err wrapped so that it Is context.Canceled: it
// says nothing of the dependency's health.
func health(err error, counts bool) error {
	switch {
	case err == nil || counts:
		return err
	}
	return noNews{err}
}

// errNoNews is the news of an attempt that ended without an error of its
// own to say why (it panicked).
var errNoNews error = noNews{}

// noNews is the end of an attempt that says nothing of the dependency's
// health: it Is context.Canceled, and keeps the attempt's own error.
type noNews struct{ err error }

func (e noNews) Error() string {
	if e.err == nil {
		return "retry: the attempt says nothing of the dependency"
	}
	return "retry: the attempt says nothing of the dependency: " + e.err.Error()
}
func (e noNews) Is(target error) bool { return target == context.Canceled }
func (e noNews) Unwrap() error        { return e.err }
