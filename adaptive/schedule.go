package adaptive

import "time"

// schedule is the Limiter's book of slots: the times at which booked
// attempts start, one slot's length apart at the rate of their booking.
// Times are offsets from the Limiter's origin.
//
// A booking takes the first free slot at or after the time its attempt is
// planned for (a retry's, after its backoff or the server's delay), not one
// at the time it is made: a retry then adds its load when it is sent, and
// the throttled attempts of one second, told to come back when the
// provider's window turns, are spaced out after that turn instead of
// arriving in a burst on top of the attempts booked for it.
//
// The book is the run of slots taken up to next, one gap before the run's
// last stretch, and a few holes. A booking planned beyond next opens a new
// stretch at its time, and the free slots between the old end and it stay
// bookable by attempts planned before them; a booking planned inside the gap
// splits it, and its smaller part is lost. A booking given back leaves a
// hole, which the next booking planned before it takes; when the holes are
// all in use, the earliest is lost. A lost slot passes unused, which never
// books two attempts in one slot. So the book is a few words, and a booking
// costs O(1).
type schedule struct {
	next     time.Duration // the end of the slots taken
	gapStart time.Duration // [gapStart, gapEnd): free slots before the last stretch
	gapEnd   time.Duration
	holes    [holes]time.Duration // free slots given back; noHole where none
	last     time.Duration        // the start of the last booking
	undone   bool                 // the last booking was given back

	// before is the book before the last booking, for undo.
	before struct {
		next, gapStart, gapEnd time.Duration
		holes                  [holes]time.Duration
	}
}

const (
	holes  = 8
	noHole = -1
)

func newSchedule(now time.Duration) schedule {
	b := schedule{next: now, gapStart: now, gapEnd: now, undone: true}
	for i := range b.holes {
		b.holes[i] = noHole
	}
	return b
}

// book takes a slot, of length slot, for an attempt planned for want (want
// >= now), booked at now, and returns its start.
func (b *schedule) book(now, want, slot time.Duration) time.Duration {
	b.before.next, b.before.gapStart, b.before.gapEnd, b.before.holes = b.next, b.gapStart, b.gapEnd, b.holes
	b.undone = false
	b.last = b.take(now, want, slot)
	return b.last
}

func (b *schedule) take(now, want, slot time.Duration) time.Duration {
	// The earliest hole that the attempt can use.
	best := -1
	for i, h := range b.holes {
		switch {
		case h == noHole:
		case h < now:
			b.holes[i] = noHole // passed unused
		case h >= want && (best < 0 || h < b.holes[best]):
			best = i
		}
	}
	if best >= 0 {
		h := b.holes[best]
		b.holes[best] = noHole
		return h
	}
	gs := max(b.gapStart, now) // free slots in the past are lost
	switch {
	case want <= gs && gs+slot <= b.gapEnd:
		// The first free slot of the gap.
		b.gapStart = gs + slot
		return gs
	case want > gs && want+slot <= b.gapEnd:
		// Inside the gap: keep its larger part.
		if want-gs >= b.gapEnd-(want+slot) {
			b.gapStart, b.gapEnd = gs, want
		} else {
			b.gapStart = want + slot
		}
		return want
	case want <= b.next:
		start := b.next
		b.next += slot
		return start
	}
	// Beyond the last slot taken: a new stretch, and the gap before it.
	b.gapStart, b.gapEnd = max(b.next, now), want
	b.next = want + slot
	return want
}

// cancel gives back the booking that starts at start, at now: the last
// booking is undone; another, if still to come, leaves a hole. A slot that
// is free already (a booking given back twice) stays as it is.
func (b *schedule) cancel(now, start time.Duration) {
	if !b.undone && start == b.last {
		b.next, b.gapStart, b.gapEnd, b.holes = b.before.next, b.before.gapStart, b.before.gapEnd, b.before.holes
		b.undone = true
		return
	}
	if start < now || start >= b.next || (start >= b.gapStart && start < b.gapEnd) {
		return
	}
	earliest := 0
	for _, h := range b.holes {
		if h == start {
			return
		}
	}
	for i, h := range b.holes {
		if h == noHole || h < now {
			b.holes[i] = start
			return
		}
		if h < b.holes[earliest] {
			earliest = i
		}
	}
	b.holes[earliest] = start
}
