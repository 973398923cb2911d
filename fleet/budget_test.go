package fleet_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry"
)

// retriesOver runs processes processes for 10s, each with its own budget
// NewBudget(0.1, floor) and calls calls a second that always fail (4
// attempts each at most), and returns the retries the fleet made.
func retriesOver(processes, calls int, floor float64) int {
	var retries atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errDown := errors.New("provider down")
	var wg sync.WaitGroup
	for range processes {
		p := retry.Policy{MaxAttempts: 4, Backoff: retry.Constant(time.Millisecond), Budget: retry.NewBudget(0.1, floor)}
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(calls))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				wg.Go(func() {
					attempts := 0
					_ = retry.Do(context.Background(), func(context.Context) error { attempts++; return errDown }, p)
					retries.Add(int64(attempts - 1))
				})
			}
		})
	}
	wg.Wait()
	return int(retries.Load())
}

// A ratio budget composes across processes by itself; its floor multiplies
// by the number of processes, unless each process takes its share of it.
// The package doc quotes these figures.
func TestBudgetAcrossProcesses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		one := retriesOver(1, 200, 10)      // one process makes all the calls
		four := retriesOver(4, 50, 10)      // four share them, each with the same budget
		shared := retriesOver(4, 50, 10./4) // four, each with a quarter of the floor
		t.Logf("retries a second over 10s, 200 failing calls a second, NewBudget(0.1, floor):")
		t.Logf("  1 process, floor 10:    %.1f", float64(one)/10)
		t.Logf("  4 processes, floor 10:  %.1f", float64(four)/10)
		t.Logf("  4 processes, floor 2.5: %.1f", float64(shared)/10)
		// The ratio earns 0.1 a call; the floor starts with its burst and
		// refills at its rate.
		assert.InDelta(t, 0.1*2000+10*10+10, one, 3)
		assert.InDelta(t, 4*(0.1*500+10*10+10), four, 6, "each process has the whole floor")
		assert.InDelta(t, 4*(0.1*500+2.5*10+3), shared, 6, "a quarter each")
		assert.InDelta(t, one, shared, 0.05*float64(one), "a quarter of the floor each is one floor for the fleet")
	})
}
