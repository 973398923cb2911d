package sim_test

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/internal/sim"
)

const ms = time.Millisecond

func TestQueuePopsInTimeOrderThenSchedulingOrder(t *testing.T) {
	t.Parallel()
	type ev struct {
		at   time.Duration
		name string
	}
	tests := []struct {
		name string
		in   []ev
		want []string
	}{
		{"empty", nil, nil},
		{"one", []ev{{5 * ms, "a"}}, []string{"a"}},
		{"reverse", []ev{{3 * ms, "c"}, {2 * ms, "b"}, {1 * ms, "a"}}, []string{"a", "b", "c"}},
		{"ties keep scheduling order", []ev{{1 * ms, "a"}, {1 * ms, "b"}, {0, "z"}, {1 * ms, "c"}, {1 * ms, "d"}, {1 * ms, "e"}, {1 * ms, "f"}},
			[]string{"z", "a", "b", "c", "d", "e", "f"}},
		{"mixed", []ev{{4 * ms, "d"}, {1 * ms, "a"}, {4 * ms, "e"}, {2 * ms, "b"}, {3 * ms, "c"}, {2 * ms, "b2"}},
			[]string{"a", "b", "b2", "c", "d", "e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q sim.Queue[string]
			for _, e := range tt.in {
				q.Schedule(e.at, e.name)
			}
			require.Equal(t, len(tt.in), q.Len())
			var got []string
			last := time.Duration(0)
			for {
				e, ok := q.Pop()
				if !ok {
					break
				}
				assert.GreaterOrEqual(t, q.Now(), last, "Now went back in time")
				last = q.Now()
				got = append(got, e)
			}
			assert.Equal(t, tt.want, got)
			assert.Zero(t, q.Len())
		})
	}
}

// TestQueueMatchesSortedModel interleaves pops and schedules at random (each
// pop schedules up to three events, as a model does) and checks every pop
// against a sorted reference list.
func TestQueueMatchesSortedModel(t *testing.T) {
	t.Parallel()
	type item struct {
		at  time.Duration
		seq int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var (
		q    sim.Queue[int]
		ref  []item
		seq  int
		pops int
	)
	schedule := func(at time.Duration) {
		q.Schedule(at, seq)
		ref = append(ref, item{at, seq})
		seq++
	}
	for range 50 {
		schedule(time.Duration(rng.IntN(20)) * ms)
	}
	for q.Len() > 0 {
		got, ok := q.Pop()
		require.True(t, ok)
		i := slices.IndexFunc(ref, func(it item) bool { return it.seq == got })
		require.GreaterOrEqual(t, i, 0, "popped %d, never scheduled or popped twice", got)
		least := slices.MinFunc(ref, func(a, b item) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq))
		})
		require.Equal(t, least.seq, got, "pop %d = event %d, want %d", pops, got, least.seq)
		assert.Equal(t, least.at, q.Now())
		ref = slices.Delete(ref, i, i+1)
		pops++
		if seq < 2000 {
			for range rng.IntN(4) {
				// Small steps make many ties.
				schedule(q.Now() + time.Duration(rng.IntN(3))*ms)
			}
		}
	}
	assert.Empty(t, ref)
	assert.Equal(t, seq, pops)
}

func TestQueueSchedulingInThePastPanics(t *testing.T) {
	t.Parallel()
	var q sim.Queue[int]
	q.Schedule(10*ms, 1)
	_, ok := q.Pop()
	require.True(t, ok)
	require.Equal(t, 10*ms, q.Now())
	assert.Panics(t, func() { q.Schedule(9*ms, 2) })
	assert.NotPanics(t, func() { q.Schedule(10*ms, 3) }, "now itself is not the past")
}

func TestQueueAfter(t *testing.T) {
	t.Parallel()
	var q sim.Queue[string]
	q.Schedule(5*ms, "start")
	q.Pop()
	q.After(2*ms, "later")
	q.After(-time.Hour, "negative counts as now")
	q.After(math.MaxInt64, "saturates")
	tests := []struct {
		want string
		at   time.Duration
	}{
		{"negative counts as now", 5 * ms},
		{"later", 7 * ms},
		{"saturates", math.MaxInt64},
	}
	for _, tt := range tests {
		got, ok := q.Pop()
		require.True(t, ok)
		assert.Equal(t, tt.want, got)
		assert.Equal(t, tt.at, q.Now(), "Now after %q", tt.want)
	}
}

func TestQueuePopOnEmptyKeepsNow(t *testing.T) {
	t.Parallel()
	var q sim.Queue[int]
	q.Schedule(3*ms, 1)
	q.Pop()
	_, ok := q.Pop()
	assert.False(t, ok)
	assert.Equal(t, 3*ms, q.Now())
	assert.Zero(t, q.Len())
}

func TestQueueReset(t *testing.T) {
	t.Parallel()
	var q sim.Queue[int]
	q.Schedule(3*ms, 1)
	q.Schedule(4*ms, 2)
	q.Pop()
	q.Reset()
	assert.Zero(t, q.Len())
	assert.Zero(t, q.Now())
	q.Schedule(1*ms, 7) // the past of before the reset is allowed again
	got, ok := q.Pop()
	require.True(t, ok)
	assert.Equal(t, 7, got)
}

func BenchmarkQueue(b *testing.B) {
	b.ReportAllocs()
	var q sim.Queue[int]
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 200 {
		q.Schedule(time.Duration(rng.IntN(1000)), i)
	}
	for b.Loop() {
		e, _ := q.Pop()
		q.After(time.Duration(rng.IntN(1000)), e)
	}
}
