package adaptive_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// Against a storage that serves C writes at once at its base latency and
// queues the rest, with three times C writers and no limit configured, every
// 5s window after the first 10s holds at most 1.3C in flight and writes at
// least 0.8 of what the storage serves at capacity; when C halves or
// doubles at 30s, the windows from 35s on meet the same bounds for the new
// C.
func TestConcurrencyFindsTheCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		before, after int
	}{
		{"20", 20, 20},
		{"50", 50, 50},
		{"200", 200, 200},
		{"100 halves", 100, 50},
		{"50 doubles", 50, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const change, end = 30 * time.Second, 60 * time.Second
				capacity := func(since time.Duration) int {
					if since >= change {
						return tt.after
					}
					return tt.before
				}
				st := newStorage(capacity, 20*time.Millisecond)
				slots := &adaptive.Concurrency{}
				l := &load{slots: slots, write: st.write, start: st.start, window: 5 * time.Second}
				l.run(3*max(tt.before, tt.after), end, 0)
				report := l.report()
				for i, s := range l.spans {
					from := time.Duration(i) * l.window
					c := capacity(from)
					if from < 10*time.Second || (from >= change && from < change+5*time.Second) || from >= end {
						continue
					}
					assert.LessOrEqual(t, float64(s.peak), 1.3*float64(c), "peak in flight from %v\n%s", from, report)
					assert.GreaterOrEqual(t, float64(s.written)/l.window.Seconds(), 0.8*st.perSecond(c),
						"written from %v\n%s", from, report)
				}
				t.Logf("C = %d then %d, final limit %d\n%s", tt.before, tt.after, slots.Limit(), report)
			})
		})
	}
}

// A backlog of writes, done by more writers than the storage serves at
// once, drains within 1.15 times as long as it takes with the best fixed
// limit, C, without the Concurrency being told C.
func TestConcurrencyDrainsABacklog(t *testing.T) {
	t.Parallel()
	for _, c := range []int{20, 50, 200} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			drain := func(slots retry.Concurrency) time.Duration {
				var took time.Duration
				synctest.Test(t, func(t *testing.T) {
					st := newStorage(func(time.Duration) int { return c }, 20*time.Millisecond)
					l := &load{slots: slots, write: st.write, start: st.start, window: 5 * time.Second}
					took = l.run(3*c, 0, int64(c)*1000)
				})
				return took
			}
			fixed := drain(&retry.ConcurrencyLimit{Slots: c})
			learned := drain(&adaptive.Concurrency{})
			t.Logf("C = %d: fixed %v, learned %v (%.3f)", c, fixed, learned, float64(learned)/float64(fixed))
			assert.LessOrEqual(t, float64(learned), 1.15*float64(fixed), "fixed %v, learned %v", fixed, learned)
		})
	}
}
