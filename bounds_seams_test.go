package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

// ledger wraps the bounds of a Policy and counts what the loop takes and
// gives back, each release and done checked to come exactly once.
type ledger struct {
	slots                             retry.ConcurrencyLimit
	breaker                           retry.CircuitBreaker
	lim                               retry.Limiter
	acquired, released, twiceReleased atomic.Int64
	allowed, told, twiceTold          atomic.Int64
	reserved, cancelled               atomic.Int64
	attempts                          atomic.Int64
	gauge                             inFlightGauge
}

func (l *ledger) Acquire(ctx context.Context, by time.Time) (func(time.Duration, error), error) {
	rel, err := l.slots.Acquire(ctx, by)
	if err != nil {
		return nil, err
	}
	l.acquired.Add(1)
	var once atomic.Bool
	return func(d time.Duration, err error) {
		if !once.CompareAndSwap(false, true) {
			l.twiceReleased.Add(1)
			return
		}
		l.released.Add(1)
		rel(d, err)
	}, nil
}

func (l *ledger) Allow(now time.Time) (func(time.Time, error), time.Time) {
	done, until := l.breaker.Allow(now)
	if done == nil {
		return nil, until
	}
	l.allowed.Add(1)
	var once atomic.Bool
	return func(end time.Time, err error) {
		if !once.CompareAndSwap(false, true) {
			l.twiceTold.Add(1)
			return
		}
		l.told.Add(1)
		done(end, err)
	}, time.Time{}
}

func (l *ledger) Until(t time.Time) time.Time { return l.breaker.Until(t) }

func (l *ledger) Reserve(ctx context.Context, t time.Time) (retry.Reservation, error) {
	r, err := l.lim.Reserve(ctx, t)
	if err == nil {
		l.reserved.Add(1)
	}
	return r, err
}

func (l *ledger) Cancel(r retry.Reservation) {
	l.cancelled.Add(1)
	l.lim.Cancel(r)
}

// Every bound meets every other: for each mix of hedging, Limiter, Budget,
// deadline, Concurrency and Breaker, many calls whose attempts fail, hang,
// succeed or are given up on at random never hold more slots than there
// are, give back every slot and every breaker leave exactly once, start an
// attempt on every booking not given back, and never outlast their
// deadline.
func TestBoundsMeetEveryOtherFeature(t *testing.T) {
	t.Parallel()
	for mix := range 1 << 6 {
		hedged, limited, budgeted := mix&1 != 0, mix&2 != 0, mix&4 != 0
		timed, slotted, broken := mix&8 != 0, mix&16 != 0, mix&32 != 0
		if !slotted && !broken {
			continue // the rest is tested elsewhere
		}
		name := fmt.Sprintf("hedge=%v,limiter=%v,budget=%v,deadline=%v,slots=%v,breaker=%v",
			hedged, limited, budgeted, timed, slotted, broken)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runBoundsMix(t, uint64(mix), hedged, limited, budgeted, timed, slotted, broken) })
		})
	}
}

func runBoundsMix(t *testing.T, seed uint64, hedged, limited, budgeted, timed, slotted, broken bool) {
	l := &ledger{
		slots:   retry.ConcurrencyLimit{Slots: 4, Queue: 8},
		breaker: retry.CircuitBreaker{Failures: 6, OpenFor: 200 * time.Millisecond, Probes: 2},
		lim:     retry.RateLimiter(rate.NewLimiter(rate.Every(2*time.Millisecond), 3)),
	}
	p := retry.Policy{
		MaxAttempts:    5,
		Backoff:        retry.Exponential{Base: 5 * time.Millisecond, Cap: 40 * time.Millisecond},
		Rand:           syncRand(seed),
		MinAttemptTime: time.Millisecond,
	}
	if hedged {
		p.HedgeDelay = retry.Constant(8 * time.Millisecond)
		p.MaxInFlight = 3
	}
	if limited {
		p.Limiter = l
	}
	if budgeted {
		p.Budget = retry.NewBudget(0.5, 20)
	}
	if slotted {
		p.Concurrency = l
	}
	if broken {
		p.Breaker = l
	}

	rng := rand.New(rand.NewPCG(seed, 7))
	type plan struct {
		outcomes []int // per attempt: 0 success, 1 reset, 2 permanent, 3 a hang that times out
		latency  time.Duration
		deadline time.Duration
		giveUp   time.Duration
	}
	plans := make([]plan, 60)
	for i := range plans {
		pl := &plans[i]
		for range 6 {
			pl.outcomes = append(pl.outcomes, rng.IntN(4))
		}
		pl.latency = time.Duration(1+rng.IntN(20)) * time.Millisecond
		if timed {
			pl.deadline = time.Duration(10+rng.IntN(120)) * time.Millisecond
		}
		if rng.IntN(6) == 0 {
			pl.giveUp = time.Duration(rng.IntN(60)) * time.Millisecond
		}
	}

	var wg sync.WaitGroup
	for i, pl := range plans {
		wg.Go(func() {
			time.Sleep(time.Duration(i%10) * 7 * time.Millisecond) // arrivals spread over 70ms, in waves
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if pl.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, pl.deadline)
				defer cancel()
			}
			if pl.giveUp > 0 {
				stop := time.AfterFunc(pl.giveUp, cancel)
				defer stop.Stop()
			}
			start := time.Now()
			var n atomic.Int64
			err := retry.Do(ctx, func(ctx context.Context) error {
				l.attempts.Add(1)
				l.gauge.enter()
				defer l.gauge.leave()
				k := int(n.Add(1)-1) % len(pl.outcomes)
				select {
				case <-time.After(pl.latency):
				case <-ctx.Done():
					return ctx.Err()
				}
				switch pl.outcomes[k] {
				case 0:
					return nil
				case 1:
					return syscall.ECONNRESET
				case 2:
					return retry.Permanent(errors.New("404"))
				}
				select { // hangs until cut, given up or timed out
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(300 * time.Millisecond):
					return context.DeadlineExceeded
				}
			}, p)
			if pl.deadline > 0 {
				assert.LessOrEqual(t, time.Since(start), pl.deadline, "call %d outlasted its deadline", i)
			}
			if err != nil {
				var re *retry.Error
				if assert.ErrorAs(t, err, &re, "call %d", i) {
					assert.Error(t, re.Reason)
				}
			}
		})
	}
	wg.Wait()
	synctest.Wait()

	if slotted {
		assert.LessOrEqual(t, l.gauge.peak.Load(), int64(4), "attempts in flight at once")
		assert.Equal(t, l.acquired.Load(), l.released.Load(), "every slot given back")
		assert.Zero(t, l.twiceReleased.Load(), "no slot given back twice")
		assert.Zero(t, l.slots.InFlight())
		assert.Zero(t, l.slots.Waiting())
		// A slot taken for an attempt that then did not start (its breaker
		// refused it, its Budget or its deadline) was given back unused.
		assert.LessOrEqual(t, l.attempts.Load(), l.acquired.Load(), "every attempt held a slot")
	}
	if broken {
		assert.Equal(t, l.allowed.Load(), l.told.Load(), "every attempt let through is told of")
		assert.Zero(t, l.twiceTold.Load(), "none twice")
		assert.LessOrEqual(t, l.attempts.Load(), l.allowed.Load(), "every attempt was let through")
	}
	if limited {
		assert.Equal(t, l.reserved.Load(), l.cancelled.Load()+l.attempts.Load(),
			"every booking started an attempt or was given back")
	}
	require.Positive(t, l.attempts.Load())
}

// syncRand is a seeded Policy.Rand safe for concurrent use.
func syncRand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed+1))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}
