package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// Against a provider of capacity C a second that answers 429 above it, with
// many callers and no configured rate, every 10s window after a warm-up of
// 30s admits between 0.6C and 1.3C a second (served at least 0.6C, sent at
// most 1.3C), with under 10% of its attempts throttled; and when the
// capacity doubles at 90s, the windows from 120s on meet the same bounds for
// 2C. Each case runs 150s of virtual time; each call has a 5s deadline and
// a MinAttemptTime of 100ms, and a caller whose call found no time left
// waits a second before the next, as one that sheds requests would.
func TestLimiterFindsTheCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		callers  int
		noDelay  bool // 429 without Retry-After
		budget   bool
		// throttled bounds the share of a window's attempts throttled; 0
		// means the target, 10%.
		throttled float64
	}{
		{name: "100/s, 200 callers", capacity: 100, callers: 200},
		{name: "100/s, 200 callers, no Retry-After", capacity: 100, callers: 200, noDelay: true},
		{name: "100/s, 200 callers, 10% budget", capacity: 100, callers: 200, budget: true},
		{name: "30/s, 1000 callers", capacity: 30, callers: 1000},
		// At 10/s, one attempt too many in a second is 9% of it: the count
		// is too coarse for the 10% target to be a bound with a margin.
		// It measures 8.6%; the test allows 15%.
		{name: "10/s, 200 callers", capacity: 10, callers: 200, throttled: 0.15},
		{name: "500/s, 200 callers", capacity: 500, callers: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c := tt.capacity
				p := newProvider(func(s int) int {
					if s >= 90 {
						return 2 * c
					}
					return c
				}, 5*time.Millisecond)
				p.noDelay = tt.noDelay
				lim := &adaptive.Limiter{}
				policy := retry.Policy{Limiter: lim, MaxAttempts: 5, MinAttemptTime: 100 * time.Millisecond}
				if tt.budget {
					policy.Budget = retry.NewBudget(0.1, 1)
				}
				callers(tt.callers, 150*time.Second, 5*time.Second, p, policy)
				report := p.report()
				worst := struct{ served, sent, throttled float64 }{served: math.Inf(1)}
				for i, w := range p.windows {
					from := time.Duration(i) * windowLen
					var capacity float64
					switch {
					case from >= 30*time.Second && from < 90*time.Second:
						capacity = float64(c)
					case from >= 120*time.Second:
						capacity = float64(2 * c)
					default:
						continue
					}
					perSecond := windowLen.Seconds()
					worst.served = min(worst.served, float64(w.served)/perSecond/capacity)
					worst.sent = max(worst.sent, float64(w.attempts)/perSecond/capacity)
					worst.throttled = max(worst.throttled, float64(w.throttled)/float64(w.attempts))
					assert.GreaterOrEqual(t, float64(w.served)/perSecond, 0.6*capacity, "served from %v\n%s", from, report)
					assert.LessOrEqual(t, float64(w.attempts)/perSecond, 1.3*capacity, "sent from %v\n%s", from, report)
					bound := tt.throttled
					if bound == 0 {
						bound = 0.1
					}
					assert.Less(t, float64(w.throttled), bound*float64(w.attempts), "throttled from %v\n%s", from, report)
				}
				t.Logf("%s: worst window: served %.2fC, sent %.2fC, %.1f%% throttled; final rate %.1f/s\n%s",
					tt.name, worst.served, worst.sent, 100*worst.throttled, lim.Rate(), report)
			})
		})
	}
}

// t0 is virtual time 0 for the tests that pass the time.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

var (
	err429 = &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: time.Second}
	err500 = &retry.ResponseError{StatusCode: 500, Status: "500 Internal Server Error"}
)

// served feeds lim n attempts a second for the given time from from, each
// booked as it is due and answered with a success 5ms later, and returns
// the time after the last.
func served(lim *adaptive.Limiter, from, span time.Duration, n int) time.Duration {
	step := time.Second / time.Duration(n)
	for d := time.Duration(0); d < span; d += step {
		now := from + d
		r := lim.ReserveAt(at(now), at(now))
		end := max(now, r.Start.Sub(t0)) + 5*time.Millisecond
		lim.LearnAt(at(end), 5*time.Millisecond, nil)
	}
	return from + span
}

// A Limiter that has learned no throttle books every attempt at once,
// whatever time it is planned for, and takes no lock to do it.
func TestLimiterBooksAtOnceUntilThrottled(t *testing.T) {
	t.Parallel()
	var lim adaptive.Limiter
	before := time.Now()
	r, err := lim.Reserve(context.Background(), before.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, r.Start.Before(before), "Start = %v, before %v", r.Start, before)
	assert.False(t, r.Start.After(time.Now()))
	assert.Zero(t, r.Slack)
	assert.Zero(t, lim.Rate(), "no rate until a throttle")

	for range 1000 {
		r, _ = lim.Reserve(context.Background(), time.Now())
		lim.Learn(time.Millisecond, nil)
		lim.Learn(time.Millisecond, err500) // a failure is no throttle
	}
	assert.Zero(t, lim.Rate())
	lim.Cancel(r) // nothing to give back
	assert.Zero(t, lim.Rate())
}

// A throttle cuts the rate to 0.85 of the capacity measured: the successes
// of the last second.
func TestLimiterCutsToTheAcceptedRate(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	assert.InDelta(t, 85, lim.Rate(), 2, "0.85 of 100/s")

	// Paced now: bookings made together are one slot apart, and each that
	// waits may be woken 20ms late at least.
	first := lim.ReserveAt(at(now), at(now))
	second := lim.ReserveAt(at(now), at(now))
	gap := second.Start.Sub(first.Start)
	assert.InDelta(t, float64(time.Second)/85, float64(gap), float64(time.Second)/85*0.05, "slot = %v", gap)
	assert.GreaterOrEqual(t, second.Slack, 20*time.Millisecond)
}

// A provider counting per second refuses for the rest of its window, and
// the attempts booked before a cut are sent at the old rate: their 429s are
// not news, and cut nothing more. One episode cuts once.
func TestLimiterCutsOncePerEpisode(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	rate := lim.Rate()
	require.InDelta(t, 85, rate, 2)

	// A burst of 429s in the next half second, of attempts sent after the
	// cut: within the server's delay (1s) and the hold.
	for i := range 50 {
		end := now + time.Duration(i)*10*time.Millisecond
		lim.LearnAt(at(end), 5*time.Millisecond, err429)
	}
	assert.Equal(t, rate, lim.Rate(), "the 429s of the same episode")

	// A 429 long after, of an attempt sent before the cut.
	now += 5 * time.Second
	lim.LearnAt(at(now), 5*time.Second+time.Millisecond, err429)
	assert.Equal(t, rate, lim.Rate(), "an attempt booked at the old rate")

	// A 429 of an attempt sent after the hold, while the provider has
	// accepted more than the current rate over the last second (150
	// successes of attempts booked before the cut): the refused attempts
	// came from those bookings, not from the current rate.
	for range 150 {
		now += time.Second / 150
		lim.LearnAt(at(now), 5*time.Millisecond, nil)
	}
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	assert.Greater(t, lim.Rate(), rate, "no cut while the provider accepts more than the pace")

	// But one of an attempt sent after the hold, when the provider accepts
	// less than the current rate, cuts again.
	now = served(lim, now, 2*time.Second, 50)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	assert.InDelta(t, 42.5, lim.Rate(), 1, "0.85 of the 50/s accepted")
}

// The rate grows back only with successes: along the cubic curve, back to
// the peak after 3s of them, and it never drops below MinRate.
func TestLimiterGrowsWithSuccesses(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	require.InDelta(t, 85, lim.Rate(), 2)

	// No success for 10s: no growth.
	now += 10 * time.Second
	lim.ReserveAt(at(now), at(now))
	assert.InDelta(t, 85, lim.Rate(), 2, "no growth without successes")

	// 3s of successes at 100/s: back at the peak.
	now = served(lim, now, 3*time.Second, 100)
	lim.ReserveAt(at(now), at(now))
	assert.InDelta(t, 100, lim.Rate(), 3, "the peak again after 3s")

	// Beyond it, at most 1.2 times the answers of the last second.
	now = served(lim, now, 10*time.Second, 100)
	lim.ReserveAt(at(now), at(now))
	assert.InDelta(t, 120, lim.Rate(), 3, "1.2 times the 100/s answered")
}

// However many throttles, the rate stays at or above MinRate, so that the
// Limiter keeps learning; MinRate's bad values are normalised.
func TestLimiterMinRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		min, want float64
	}{{0, 1}, {-5, 1}, {math.NaN(), 1}, {1e-9, 1e-3}, {2.5, 2.5}}
	for _, tt := range tests {
		lim := &adaptive.Limiter{MinRate: tt.min}
		now := served(lim, 0, 2*time.Second, 100)
		for range 40 {
			// Every attempt refused, one every 1000s: each cuts.
			now += 1000 * time.Second
			lim.ReserveAt(at(now), at(now))
			lim.LearnAt(at(now), 0, err429)
		}
		assert.InDelta(t, tt.want, lim.Rate(), tt.want*1e-9, "MinRate %v", tt.min)
	}
}

// A booking takes the first free slot at or after the time its attempt is
// planned for: a retry told to wait a second takes a slot then, and leaves
// the slots before it to the attempts due now.
func TestLimiterBooksAtThePlannedTime(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	now += time.Millisecond

	retry1 := lim.ReserveAt(at(now), at(now+time.Second))
	assert.Equal(t, at(now+time.Second), retry1.Start, "the retry's own time")
	assert.Zero(t, retry1.Slack, "it waits for nothing but its own time")
	first := lim.ReserveAt(at(now), at(now))
	assert.Equal(t, at(now), first.Start, "a slot before the retry's")
	retry2 := lim.ReserveAt(at(now), at(now+time.Second))
	assert.Greater(t, retry2.Start, retry1.Start, "the next free slot after it")
	assert.Less(t, retry2.Start.Sub(retry1.Start), 20*time.Millisecond)
}

// A booking given back frees its slot for the next one: at once when it is
// the last one made, as a hole otherwise.
func TestLimiterCancelFreesTheSlot(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)

	a := lim.ReserveAt(at(now), at(now))
	b := lim.ReserveAt(at(now), at(now))
	c := lim.ReserveAt(at(now), at(now))
	lim.Cancel(c)
	assert.Equal(t, c.Start, lim.ReserveAt(at(now), at(now)).Start, "the last booking, undone")
	lim.Cancel(b)
	assert.Equal(t, b.Start, lim.ReserveAt(at(now), at(now)).Start, "a hole, taken by the next booking")
	assert.NotEqual(t, a.Start, b.Start)

	lim.Cancel(retry.Reservation{Start: a.Start})               // not this Limiter's
	lim.Cancel(retry.Reservation{Start: a.Start, Handle: "no"}) // nor this
	lim.Cancel((&adaptive.Limiter{}).ReserveAt(at(now), at(now)))
	next := lim.ReserveAt(at(now), at(now))
	assert.Greater(t, next.Start, c.Start, "no slot was freed by bookings of others")
}

// Times that go back count as the latest one given.
func TestLimiterTimeNeverGoesBack(t *testing.T) {
	t.Parallel()
	lim := &adaptive.Limiter{}
	now := served(lim, 0, 2*time.Second, 100)
	lim.LearnAt(at(now), 5*time.Millisecond, err429)
	r := lim.ReserveAt(at(now-time.Hour), at(now-time.Hour))
	assert.False(t, r.Start.Before(at(now)), "Start = %v", r.Start.Sub(t0))
}

// What the Limiter learns: the answers that are throttles cut, the others
// do not.
func TestLimiterLearnsOnlyThrottles(t *testing.T) {
	t.Parallel()
	notThrottles := []error{
		err500,
		&retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"},
		context.DeadlineExceeded,
		errors.New("connection reset"),
	}
	for _, err := range notThrottles {
		lim := &adaptive.Limiter{}
		now := served(lim, 0, 2*time.Second, 100)
		lim.LearnAt(at(now), 5*time.Millisecond, err)
		assert.Zero(t, lim.Rate(), "%v", err)
	}
	throttles := []error{
		err429,
		&retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable", RetryAfter: time.Second},
		fmt.Errorf("call: %w", err429),
		throttledError{true},
	}
	for _, err := range throttles {
		lim := &adaptive.Limiter{}
		now := served(lim, 0, 2*time.Second, 100)
		lim.LearnAt(at(now), 5*time.Millisecond, err)
		assert.InDelta(t, 85, lim.Rate(), 2, "%v", err)
	}
}

type throttledError struct{ throttled bool }

func (e throttledError) Error() string   { return fmt.Sprintf("throttled: %v", e.throttled) }
func (e throttledError) Throttled() bool { return e.throttled }

// In the loop: a retry after a 429 waits for the server's delay, not for
// that and the Limiter's slot one after the other.
func TestLimiterHonoursTheServersDelayOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &adaptive.Limiter{}
		start := time.Now()
		var starts []time.Duration
		fn := func(context.Context) error {
			starts = append(starts, time.Since(start))
			if len(starts) == 1 {
				return err429 // Retry-After: 1s
			}
			return nil
		}
		require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{Limiter: lim, Backoff: retry.Constant(0)}))
		assert.Equal(t, []time.Duration{0, time.Second}, starts)
		assert.Positive(t, lim.Rate(), "the 429 was learned")
	})
}

// In the loop: a call whose deadline comes before the Limiter's next free
// slot stops at once, without sleeping, and takes no slot from the calls
// that can use one; a retry the Budget refuses gives its slot back.
func TestLimiterWithDeadlineAndBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := &adaptive.Limiter{}
		// Learn a throttle at a slow rate: 10 attempts in the first second,
		// then one refused.
		now := time.Now()
		for i := range 10 {
			at := now.Add(time.Duration(i) * 100 * time.Millisecond)
			lim.ReserveAt(at, at)
			lim.LearnAt(at, 0, nil)
		}
		time.Sleep(1100 * time.Millisecond)
		lim.Learn(0, err429)
		require.InDelta(t, 8.5, lim.Rate(), 1)

		// Fill the next half second.
		for range 4 {
			_, _ = lim.Reserve(t.Context(), time.Now())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		begin := time.Now()
		err := retry.Do(ctx, func(context.Context) error { return nil }, retry.Policy{Limiter: lim})
		require.ErrorIs(t, err, retry.ErrNoTimeLeft)
		assert.Zero(t, time.Since(begin), "it gave up at once")
		next := lim.ReserveAt(time.Now(), time.Now())
		lim.Cancel(next)

		// A retry refused by the Budget gives its slot back.
		calls := 0
		err = retry.Do(t.Context(), func(context.Context) error { calls++; return err500 },
			retry.Policy{Limiter: lim, Budget: retry.NewBudget(0, 0), Backoff: retry.Constant(0)})
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		assert.Equal(t, 1, calls)
		after := lim.ReserveAt(time.Now(), time.Now())
		slot := time.Duration(float64(time.Second) / lim.Rate())
		assert.Greater(t, after.Start, next.Start)
		assert.Less(t, after.Start.Sub(next.Start), slot*3/2,
			"one slot taken by the call's one attempt (slot %v), none by its refused retry", slot)
	})
}

// A Limiter that learned a low rate, from a provider that served 1 request
// a second while the client sent little, finds the capacity again when the
// provider grows a hundredfold at 10s and the callers come: slowly while
// the rate is near the old peak, then doubling for each round of news. The
// first window served at 0.6C starts by 120s, and every window after it is
// served at 0.6C at least, with under 10% of its attempts throttled.
//
// When that window comes differs from run to run, and seeding Rand does not
// change how often a run is late: the goroutines that wake at one virtual
// instant run in the order the scheduler picks (-race perturbs it more), and
// the climb amplifies that order. While the rate is low, the 200 callers
// move in step: most find the queue full up to their 5s deadline and shed
// together, the next second brings few answers, and the probe bound (1.2
// times the answers of the last second) pulls the rate back down; the
// cycle, the length of the deadline, can hold a run near 40/s for a few
// rounds. Measured over 1300 runs, 600 of them under -race (phase two run
// to 150s or 300s): the first window at 0.6C was the one from 80s in 27%,
// from 90s in 68%, from 100s in 1% and from 110s in 4%, never later; no
// window after it fell below 0.6C, nor had more than 7.7% throttled. The
// window that crosses is not bounded: the overshoot that ends the climb
// throttled up to 13.6% of its attempts. So the bound is the latest
// crossing seen plus one window.
func TestLimiterRecoversAHundredfold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(func(s int) int {
			if s < 10 {
				return 1
			}
			return 100
		}, 5*time.Millisecond)
		lim := &adaptive.Limiter{}
		callers(2, 10*time.Second, 5*time.Second, p, retry.Policy{Limiter: lim, MaxAttempts: 1})
		require.InDelta(t, 1, lim.Rate(), 0.1, "the rate learned at 1/s")
		callers(200, 150*time.Second, 5*time.Second, p,
			retry.Policy{Limiter: lim, MaxAttempts: 5, MinAttemptTime: 100 * time.Millisecond})
		report := p.report()
		first := -1
		for i, w := range p.windows {
			if first < 0 && w.served >= 600 {
				first = i
				continue
			}
			if first >= 0 {
				from := time.Duration(i) * windowLen
				assert.GreaterOrEqual(t, w.served, 600, "served from %v\n%s", from, report)
				assert.Less(t, float64(w.throttled), 0.1*float64(w.attempts), "throttled from %v\n%s", from, report)
			}
		}
		require.GreaterOrEqual(t, first, 0, "no window at 0.6C\n%s", report)
		assert.LessOrEqual(t, time.Duration(first)*windowLen, 120*time.Second,
			"the first window at 0.6C\n%s", report)
		t.Logf("first window at 0.6C: from %v\n%s", time.Duration(first)*windowLen, report)
	})
}
