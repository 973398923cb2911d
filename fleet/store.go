package fleet

import (
	"context"
	"time"
)

// Store keeps one schedule of slots where every process of a fleet reaches
// it (a row in PostgreSQL, a key in Redis): the whole state of one shared
// limit. It books slots by GCRA, the generic cell rate algorithm: the state
// is one time, the schedule's end (the theoretical arrival time, TAT), on
// the store's own clock. A [Limiter] calls it; users need it only to write a
// store of their own.
//
// Only durations cross the wire, never a time read on the client: each
// booking is measured from the store's own now, so processes whose clocks
// disagree share one limit.
//
// A Store must be safe for concurrent use. Each method is one round trip
// that ends, with an error, when ctx does (the Limiter also stops waiting
// for a store that does not).
type Store interface {
	// Book books n >= 1 consecutive slots of the schedule s, none earlier
	// than after >= 0 from the store's now, as one atomic step, and moves
	// the end of the schedule to
	//
	//	base + n*s.Interval, where base = max(end, now + after)
	//
	// It returns wait = base - now, from which slot i (0-based) may start
	// max(after, wait - s.Tolerance + i*s.Interval) after the store's now,
	// and the booking's mark: a number the store never gave to another
	// booking of this schedule (a counter that starts, when the schedule is
	// new, at the store's time in microseconds is enough). A Limiter asks
	// for an after no longer than the tolerance (or one interval), or than
	// a ClockedStore's answers lately took to come back (so that its slots
	// do not pass on the way), except for its first booking after the store
	// failed, which it places after its fallback's bookings.
	Book(ctx context.Context, s Schedule, n int, after time.Duration) (wait time.Duration, mark int64, err error)

	// Refund gives back the last n slots of the booking whose mark this is,
	// moving the end of the schedule back by n*s.Interval, but only if that
	// booking is still the schedule's last one (no Book since; earlier
	// refunds of the same booking do not count). It reports whether it did.
	// The condition is what keeps a refund safe: slots booked after the
	// refunded ones keep their places, so moving the end back under them
	// would book their places twice.
	Refund(ctx context.Context, s Schedule, mark int64, n int) (ok bool, err error)
}

// Schedule is the pace of a [Store]'s slots: one every Interval (1/rate), and
// as many as Tolerance/Interval + 1 together (the burst). A [Limiter] passes
// it with every call, so a store keeps nothing but the schedule's end.
type Schedule struct {
	// Interval is the emission interval: the time between two slots. A
	// Limiter may book with a longer one, to leave the schedule free for a
	// while after a batch (see [Limiter]); it then spaces the batch's slots
	// by 1/rate itself. A store only multiplies it by n.
	Interval time.Duration
	// Tolerance is how far ahead of the schedule's end a slot may start:
	// (burst-1) * Interval.
	Tolerance time.Duration
}

// ClockedStore is a [Store] that also tells its own clock. A [Limiter] keeps
// the limit whatever the round trips take, from either: each booking leaves
// the schedule free after its batch for as long as the process's placing of
// the store's now may be late (see Limiter). From a plain Store the process
// knows the store's now only within each round trip, so that is as long as
// the slowest round trip lately, less an interval: nothing on loopback, but
// on a link whose round trips vary (0 to 90ms, say) 5 to 8% of the rate in
// pads. From a ClockedStore it bounds the offset between the two
// clocks by all its round trips, which narrows the pads to what the fastest
// ways out and back allow; it asks Now to narrow them while they are wide.
// The stores of retrypg and retryredis are ClockedStores.
type ClockedStore interface {
	Store

	// BookClocked is Book, and also returns now, the store's time at which
	// it booked (the time wait is measured from), in nanoseconds from an
	// origin that the store keeps fixed (the Unix epoch, for a wall
	// clock). Only the differences between its answers matter, so the
	// store's clock may disagree with the process's; a clock that jumps is
	// detected, and costs what a slow answer would.
	BookClocked(ctx context.Context, s Schedule, n int, after time.Duration) (wait time.Duration, mark int64, now int64, err error)

	// Now returns the store's time, on the clock BookClocked reports,
	// without booking: one round trip that reads the clock as a booking
	// does (in Redis, TIME in a script; in PostgreSQL, clock_timestamp()).
	Now(ctx context.Context) (now int64, err error)
}
