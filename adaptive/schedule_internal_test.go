package adaptive

import (
	"slices"
	"testing"
	"time"
)

// However bookings and cancellations interleave (the same booking given
// back twice included), the book never puts two live bookings in one slot,
// nor starts one before its planned time or before the time it was made.
func FuzzSchedule(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{9, 0, 9, 0, 200, 1, 1, 130, 131, 0, 7, 250, 251, 252, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const slot = 10 * time.Millisecond
		var now time.Duration
		b := newSchedule(now)
		var live []time.Duration
		for i, op := range ops {
			switch {
			case op < 128: // book, planned up to 63 slots ahead
				now += time.Duration(op%4) * slot / 3
				want := now + time.Duration(op/2)*slot/2
				start := b.book(now, want, slot)
				if start < want || start < now {
					t.Fatalf("op %d: booked at %v for %v at %v", i, start, want, now)
				}
				for _, s := range live {
					if s >= now && (start-s < slot && s-start < slot) {
						t.Fatalf("op %d: booked at %v, within a slot of %v (live %v)", i, start, s, live)
					}
				}
				live = append(live, start)
			case len(live) > 0: // give one back, maybe twice
				j := int(op) % len(live)
				start := live[j]
				b.cancel(now, start)
				if op%2 == 0 {
					b.cancel(now, start)
				}
				live = slices.Delete(live, j, j+1)
			}
		}
	})
}
