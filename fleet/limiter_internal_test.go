package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pause after a failure: 10ms growing 1.5 times a failure up to 100ms, of
// which the draw takes off up to half.
func TestPauseAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fails int
		u     float64
		want  time.Duration
	}{
		{0, 0, 5 * time.Millisecond},
		{0, 0.5, 7500 * time.Microsecond},
		{1, 0, 7500 * time.Microsecond},
		{2, 0.999999, 22499988 * time.Nanosecond},
		{5, 0, 37968750 * time.Nanosecond},
		{6, 0, 50 * time.Millisecond},
		{6, 0.999999, 99999950 * time.Nanosecond},
		{1000, 0, 50 * time.Millisecond},
		{-1, 0, 3333333 * time.Nanosecond}, // not called so, but no surprise either
	}
	for _, tt := range tests {
		if got := pauseAfter(tt.fails, tt.u); got != tt.want {
			t.Errorf("pauseAfter(%d, %v) = %v, want %v", tt.fails, tt.u, got, tt.want)
		}
	}
}

// The store's time is placed on the process's clock no earlier than it was,
// and no later than the answer came, whatever way each round trip is slow:
// a slot placed by it never starts before its place on the store's
// schedule. With a fast way back seen once, it is placed exactly, but for
// the drift the bounds allow for since.
func TestStoreClockNeverPlacesEarly(t *testing.T) {
	t.Parallel()
	const offset = 7 * time.Second // local = store + offset
	epoch := time.Now()
	c := storeClock{epoch: epoch}
	local := epoch
	var backAt time.Time // when the way back of 0 came
	legs := []struct{ out, back time.Duration }{
		{40 * time.Millisecond, 30 * time.Millisecond},
		{90 * time.Millisecond, 0}, // slow out, at once back
		{0, 80 * time.Millisecond}, // at once out, slow back
		{5 * time.Millisecond, 60 * time.Millisecond},
		{70 * time.Millisecond, 2 * time.Millisecond},
	}
	for i, leg := range legs {
		sent := local
		at := sent.Add(leg.out) // when the store read its clock, on the local clock
		recv := at.Add(leg.back)
		got, _ := c.local(sent, recv, int64(at.Sub(epoch)-offset))
		if got.Before(at) || got.After(recv) {
			t.Errorf("round trip %d (out %v, back %v): placed %v after the store's now, want between 0 and %v",
				i, leg.out, leg.back, got.Sub(at), leg.back)
		}
		if i == 1 {
			backAt = recv
		}
		if drift := time.Duration(float64(recv.Sub(backAt))*maxDrift) + time.Duration(i); i >= 1 && got.Sub(at) > drift {
			t.Errorf("round trip %d: placed %v after the store's now, want at most the drift since the way back of 0, %v", i, got.Sub(at), drift)
		}
		local = recv.Add(10 * time.Millisecond)
	}
}

// scriptedClock is a ClockedStore whose Now takes the ways out and back it
// is given, in turn, and reads the bubble's clock in between.
type scriptedClock struct {
	ClockedStore
	legs []struct{ out, back time.Duration }
}

func (s *scriptedClock) Now(context.Context) (int64, error) {
	leg := s.legs[0]
	s.legs = s.legs[1:]
	time.Sleep(leg.out)
	now := time.Now().UnixNano()
	time.Sleep(leg.back)
	return now, nil
}

// Clock probes come every 5ms while each narrows the bounds on the store's
// clock, and the gap doubles after 16 in a row that do not, up to a second;
// one that narrows them again brings the gap back to 5ms.
func TestProbeGap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &scriptedClock{}
		l := &Limiter{clocked: store, timeout: time.Second}
		l.clock.epoch = time.Now()
		probe := func(out, back time.Duration) time.Duration {
			store.legs = append(store.legs, struct{ out, back time.Duration }{out, back})
			l.mu.Lock()
			l.probes++
			l.mu.Unlock()
			l.probeOnce()
			return l.probeGap
		}
		l.probeGap = minProbeGap
		probe(0, 50*time.Millisecond) // the first reading
		for _, back := range []time.Duration{40, 30, 20, 10} {
			require.Equal(t, minProbeGap, probe(0, back*time.Millisecond), "a way back of %vms narrows the bounds", back)
		}
		for i := range 15 {
			require.Equal(t, minProbeGap, probe(0, 20*time.Millisecond), "probe %d of 16 that does not narrow them", i+1)
		}
		assert.Equal(t, 2*minProbeGap, probe(0, 20*time.Millisecond), "after 16 in a row")
		for range 16 * 10 {
			probe(20*time.Millisecond, 20*time.Millisecond)
		}
		assert.Equal(t, maxProbeGap, l.probeGap, "at most a second")
		assert.Equal(t, minProbeGap, probe(0, 0), "a way back faster than any before")
		assert.Zero(t, l.probes)
	})
}

// A batch uses only the slots its pad covers: when its first places passed
// while the answer was on its way, it starts later by as much as the margin
// covers; a slot that passed even so starts at once if it passed by at most
// an interval, and goes unused if it passed by more; and the lateness the
// margin does not cover, from such slots or from bounds that widened past
// the pad (a negative margin), takes slots from the batch's end, an interval
// each.
func TestAddGivesUpLateSlots(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	now := time.Now()
	free := func(b *batch) []int {
		var out []int
		for i := range b.n {
			if !b.taken[i] {
				out = append(out, int(b.at(i).Sub(now)/time.Microsecond))
			}
		}
		return out
	}
	add := func(n int, first time.Duration, margin time.Duration) *batch {
		l := &Limiter{sched: Schedule{Interval: ms}}
		// Slot i's place is first + i*1ms from now, the answer came now.
		return l.add(first, 1, &flight{n: n, after: -time.Hour}, now, now, margin)
	}
	// On time, a margin of 2.5ms short: the last three go unused.
	assert.Equal(t, []int{0, 1000, 2000, 3000, 4000, 5000, 6000}, free(add(10, 0, -2500*time.Microsecond)))
	// Passed by 3ms, a margin of 1ms: the batch starts 1ms later, so its
	// first slot passed by 2ms (unused) and its second by 1ms: that one
	// starts at once, an interval late, which the last slot pays for.
	assert.Equal(t, []int{-1000, 0, 1000}, free(add(5, -3*ms, ms)))
	// Passed by 500us, no margin: the one slot would start later than the
	// pad allows, and it is its own last.
	assert.Empty(t, free(add(1, -500*time.Microsecond, 0)))
	// Passed by 500us with a margin of 1ms: shifted, on time.
	assert.Equal(t, []int{0}, free(add(1, -500*time.Microsecond, ms)))
	// A burst of five booked at the store's now, with the tolerance of four
	// intervals, whose answer came 800us later, no margin: the five start
	// at once, and the batch's last slot pays.
	l := &Limiter{sched: Schedule{Interval: ms, Tolerance: 4 * ms}}
	b := l.add(0, 1, &flight{n: 9}, now, now.Add(800*time.Microsecond), 0)
	assert.Equal(t, []int{0, 0, 0, 0, 0, 1000, 2000, 3000}, free(b))
}
