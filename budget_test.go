package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
)

var _ retry.Budget = (*retry.TokenBucket)(nil)

var errBudgetFlaky = errors.New("budget test: flaky")

// budgetT0 is the time passed to a Budget by the tests that need no clock.
var budgetT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// budgetDeposit deposits n times at now.
func budgetDeposit(b retry.Budget, n int, now time.Time) {
	for range n {
		b.Deposit(now)
	}
}

// budgetGrants tries n withdrawals at now and counts those granted.
func budgetGrants(b retry.Budget, n int, now time.Time) int {
	granted := 0
	for range n {
		if b.Withdraw(now) {
			granted++
		}
	}
	return granted
}

// microsBalance is what Balance reports for a bucket holding micros
// millionths of a token, computed as TokenBucket does, so that tests can
// compare floats exactly.
func microsBalance(micros int64) float64 { return float64(micros) / 1e6 }

func TestNewBudgetEarnsExactRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		ratio       float64
		calls       int
		wantRetries int
		wantLeft    float64
	}{
		{name: "ten calls at 0.1 earn one retry", ratio: 0.1, calls: 10, wantRetries: 1, wantLeft: 0},
		{name: "nine calls at 0.1 earn none", ratio: 0.1, calls: 9, wantRetries: 0, wantLeft: 0.9},
		{name: "25 calls at 0.1", ratio: 0.1, calls: 25, wantRetries: 2, wantLeft: 0.5},
		{name: "ten calls at 0.3 earn three retries", ratio: 0.3, calls: 10, wantRetries: 3, wantLeft: 0},
		{name: "three calls at 0.3 earn none", ratio: 0.3, calls: 3, wantRetries: 0, wantLeft: 0.9},
		{name: "ten calls at 0.7", ratio: 0.7, calls: 10, wantRetries: 7, wantLeft: 0},
		{name: "100 calls at 0.01", ratio: 0.01, calls: 100, wantRetries: 1, wantLeft: 0},
		{name: "a million calls at one millionth", ratio: 0.000001, calls: 1_000_000, wantRetries: 1, wantLeft: 0},
		{name: "ratio 1", ratio: 1, calls: 5, wantRetries: 5, wantLeft: 0},
		{name: "ratio above 1", ratio: 2.5, calls: 3, wantRetries: 7, wantLeft: 0.5},
		{name: "ratio 0 earns nothing", ratio: 0, calls: 100, wantRetries: 0, wantLeft: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := retry.NewBudget(tt.ratio, 0)
			budgetDeposit(b, tt.calls, budgetT0)
			got := budgetGrants(b, tt.wantRetries+10, budgetT0)
			assert.Equal(t, tt.wantRetries, got, "NewBudget(%v, 0) after %d deposits granted %d retries, want %d",
				tt.ratio, tt.calls, got, tt.wantRetries)
			assert.Equal(t, tt.wantLeft, b.Balance(), "Balance() = %v after the retries, want %v", b.Balance(), tt.wantLeft)
		})
	}
}

func TestNewBudgetRoundsRatioToSixDecimals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		ratio float64
		want  float64 // Balance after one deposit
	}{
		{name: "0.0000004 rounds down to 0", ratio: 0.0000004, want: 0},
		{name: "0.0000005 rounds up to one millionth", ratio: 0.0000005, want: 0.000001},
		{name: "0.0000014 rounds down", ratio: 0.0000014, want: 0.000001},
		{name: "0.0000015 rounds up", ratio: 0.0000015, want: 0.000002},
		{name: "0.1234564 rounds down", ratio: 0.1234564, want: 0.123456},
		{name: "0.1234566 rounds up", ratio: 0.1234566, want: 0.123457},
		{name: "tiny ratio earns nothing", ratio: 1e-300, want: 0},
		{name: "smallest positive float earns nothing", ratio: math.SmallestNonzeroFloat64, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := retry.NewBudget(tt.ratio, 0)
			b.Deposit(budgetT0)
			assert.Equal(t, tt.want, b.Balance(), "NewBudget(%v, 0) after one deposit: Balance() = %v, want %v",
				tt.ratio, b.Balance(), tt.want)
		})
	}
}

func TestNewBudgetStartsEmpty(t *testing.T) {
	t.Parallel()
	for _, ratio := range []float64{0, 0.1, 1, 1000} {
		b := retry.NewBudget(ratio, 0)
		assert.Zero(t, b.Balance(), "NewBudget(%v, 0).Balance() = %v, want 0", ratio, b.Balance())
		assert.False(t, b.Withdraw(budgetT0), "NewBudget(%v, 0).Withdraw granted a retry from an empty bucket", ratio)
	}
}

func TestNewBudgetCapacity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		ratio        float64
		minPerSecond float64
		want         float64
	}{
		{name: "no floor holds 100", ratio: 1000, minPerSecond: 0, want: 100},
		{name: "small floor holds 100", ratio: 1000, minPerSecond: 1, want: 100},
		{name: "floor of 10 holds 100", ratio: 1000, minPerSecond: 10, want: 100},
		{name: "fractional floor", ratio: 1000, minPerSecond: 10.5, want: 105},
		{name: "floor of 20 holds 200", ratio: 1000, minPerSecond: 20, want: 200},
		{name: "largest floor", ratio: 1000, minPerSecond: 1e6, want: 1e7},
		{name: "capacity not a multiple of the ratio", ratio: 0.3, minPerSecond: 0, want: 100},
		{name: "capacity not a multiple of the ratio with floor", ratio: 0.7, minPerSecond: 30, want: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := retry.NewBudget(tt.ratio, tt.minPerSecond)
			budgetDeposit(b, int(tt.want/tt.ratio)+10, budgetT0)
			assert.Equal(t, tt.want, b.Balance(), "NewBudget(%v, %v) filled: Balance() = %v, want %v",
				tt.ratio, tt.minPerSecond, b.Balance(), tt.want)
			require.True(t, b.Withdraw(budgetT0))
			assert.Equal(t, tt.want-1, b.Balance(), "Balance() after one retry = %v, want %v", b.Balance(), tt.want-1)
		})
	}
}

func TestTokenBucketRefusedWithdrawTakesNothing(t *testing.T) {
	t.Parallel()
	b := retry.NewBudget(0.5, 0)
	b.Deposit(budgetT0)
	for i := range 3 {
		assert.False(t, b.Withdraw(budgetT0), "Withdraw %d granted with half a token held", i+1)
	}
	assert.Equal(t, 0.5, b.Balance(), "Balance() after refused withdrawals = %v, want 0.5", b.Balance())
	b.Deposit(budgetT0)
	assert.True(t, b.Withdraw(budgetT0), "Withdraw refused with one token held")
	assert.Zero(t, b.Balance(), "Balance() = %v, want 0", b.Balance())
}

func TestNewBudgetFloor(t *testing.T) {
	t.Parallel()
	type step struct {
		at   time.Duration // after budgetT0
		want bool
	}
	tests := []struct {
		name         string
		minPerSecond float64
		steps        []step
	}{
		{
			name:         "2 per second: burst 2, then one every 500ms",
			minPerSecond: 2,
			steps: []step{
				{0, true}, {0, true}, {0, false},
				{499 * time.Millisecond, false},
				{500 * time.Millisecond, true}, {500 * time.Millisecond, false},
				{10 * time.Second, true}, {10 * time.Second, true}, {10 * time.Second, false}, // refill capped at the burst
			},
		},
		{
			name:         "0.5 per second: burst 1, then one every 2s",
			minPerSecond: 0.5,
			steps: []step{
				{0, true}, {0, false},
				{1999 * time.Millisecond, false},
				{2 * time.Second, true}, {2 * time.Second, false},
			},
		},
		{
			name:         "3.5 per second: burst 4",
			minPerSecond: 3.5,
			steps: []step{
				{0, true}, {0, true}, {0, true}, {0, true}, {0, false},
				{285 * time.Millisecond, false},
				{286 * time.Millisecond, true}, {286 * time.Millisecond, false},
			},
		},
		{
			name:         "0 means no floor",
			minPerSecond: 0,
			steps:        []step{{0, false}, {time.Hour, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := retry.NewBudget(0, tt.minPerSecond)
			for i, s := range tt.steps {
				got := b.Withdraw(budgetT0.Add(s.at))
				assert.Equal(t, s.want, got, "step %d: Withdraw(t0+%v) = %v, want %v", i, s.at, got, s.want)
			}
			assert.Zero(t, b.Balance(), "the floor changed Balance() to %v", b.Balance())
		})
	}
}

func TestNewBudgetAsksFloorOnlyWhenBucketBelowOneToken(t *testing.T) {
	t.Parallel()
	b := retry.NewBudget(0.5, 1) // floor: 1 per second, burst 1

	// Three tokens in the bucket are spent first; the floor's token is kept.
	budgetDeposit(b, 6, budgetT0)
	for i := range 3 {
		require.True(t, b.Withdraw(budgetT0), "withdrawal %d refused", i+1)
		assert.Equal(t, float64(2-i), b.Balance(), "Balance() after withdrawal %d = %v, want %v", i+1, b.Balance(), 2-i)
	}
	assert.True(t, b.Withdraw(budgetT0), "the floor's token was spent by the bucket's withdrawals")
	assert.False(t, b.Withdraw(budgetT0), "a second floor token at the same instant")

	// With half a token held, the floor answers and the half token stays.
	b.Deposit(budgetT0)
	assert.False(t, b.Withdraw(budgetT0), "granted with half a token and an empty floor")
	assert.True(t, b.Withdraw(budgetT0.Add(time.Second)), "the floor did not refill after 1s")
	assert.Equal(t, 0.5, b.Balance(), "a floor grant changed Balance() to %v, want 0.5", b.Balance())

	// With a whole token held and the floor empty, the bucket answers.
	b.Deposit(budgetT0)
	assert.True(t, b.Withdraw(budgetT0.Add(time.Second)), "refused with one token in the bucket")
	assert.Zero(t, b.Balance(), "Balance() = %v, want 0", b.Balance())
}

func TestNewBudgetNormalisesBadInput(t *testing.T) {
	t.Parallel()
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name         string
		ratio        float64
		minPerSecond float64
		wantEarn     float64 // Balance after one deposit
		wantCapacity float64
		wantFloor    int // withdrawals granted out of 10 at one instant, with an empty bucket
	}{
		{name: "negative ratio", ratio: -0.5, wantEarn: 0, wantCapacity: 100},
		{name: "NaN ratio", ratio: nan, wantEarn: 0, wantCapacity: 100},
		{name: "-Inf ratio", ratio: -inf, wantEarn: 0, wantCapacity: 100},
		{name: "+Inf ratio clamped to 1000", ratio: inf, minPerSecond: 1000, wantEarn: 1000, wantCapacity: 10000, wantFloor: 10},
		{name: "ratio 5000 clamped to 1000", ratio: 5000, minPerSecond: 1000, wantEarn: 1000, wantCapacity: 10000, wantFloor: 10},
		{name: "largest ratio clamped to 1000", ratio: math.MaxFloat64, minPerSecond: 1000, wantEarn: 1000, wantCapacity: 10000, wantFloor: 10},
		{name: "ratio 1000 kept", ratio: 1000, minPerSecond: 1000, wantEarn: 1000, wantCapacity: 10000, wantFloor: 10},
		{name: "negative minPerSecond", ratio: 1, minPerSecond: -5, wantEarn: 1, wantCapacity: 100, wantFloor: 0},
		{name: "NaN minPerSecond", ratio: 1, minPerSecond: nan, wantEarn: 1, wantCapacity: 100, wantFloor: 0},
		{name: "-Inf minPerSecond", ratio: 1, minPerSecond: -inf, wantEarn: 1, wantCapacity: 100, wantFloor: 0},
		{name: "+Inf minPerSecond clamped to 1e6", ratio: 1000, minPerSecond: inf, wantEarn: 1000, wantCapacity: 1e7, wantFloor: 10},
		{name: "1e300 minPerSecond clamped to 1e6", ratio: 1000, minPerSecond: 1e300, wantEarn: 1000, wantCapacity: 1e7, wantFloor: 10},
		{name: "tiny minPerSecond has burst 1", ratio: 1, minPerSecond: math.SmallestNonzeroFloat64, wantEarn: 1, wantCapacity: 100, wantFloor: 1},
		{name: "everything NaN", ratio: nan, minPerSecond: nan, wantEarn: 0, wantCapacity: 100, wantFloor: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b, floor *retry.TokenBucket
			require.NotPanics(t, func() {
				b = retry.NewBudget(tt.ratio, tt.minPerSecond)
				floor = retry.NewBudget(tt.ratio, tt.minPerSecond)
			})
			b.Deposit(budgetT0)
			assert.Equal(t, tt.wantEarn, b.Balance(), "NewBudget(%v, %v): Balance() after one deposit = %v, want %v",
				tt.ratio, tt.minPerSecond, b.Balance(), tt.wantEarn)

			if tt.wantEarn > 0 {
				budgetDeposit(b, int(tt.wantCapacity/tt.wantEarn)+10, budgetT0)
				assert.Equal(t, tt.wantCapacity, b.Balance(), "NewBudget(%v, %v) filled: Balance() = %v, want %v",
					tt.ratio, tt.minPerSecond, b.Balance(), tt.wantCapacity)
			}

			got := budgetGrants(floor, 10, budgetT0)
			assert.Equal(t, tt.wantFloor, got, "NewBudget(%v, %v), empty: %d of 10 withdrawals granted, want %d",
				tt.ratio, tt.minPerSecond, got, tt.wantFloor)
		})
	}
}

func TestTokenBucketZeroValueRefusesEverything(t *testing.T) {
	t.Parallel()
	var b retry.TokenBucket
	assert.Zero(t, b.Balance(), "zero TokenBucket: Balance() = %v, want 0", b.Balance())
	assert.False(t, b.Withdraw(budgetT0), "zero TokenBucket granted a withdrawal")
	budgetDeposit(&b, 1000, budgetT0)
	assert.Zero(t, b.Balance(), "zero TokenBucket after deposits: Balance() = %v, want 0", b.Balance())
	assert.Zero(t, budgetGrants(&b, 10, budgetT0.Add(time.Hour)), "zero TokenBucket granted a withdrawal")
}

// Concurrency: the race detector checks the accesses, and the totals check
// that no deposit or withdrawal is lost or doubled. These tests do not call
// t.Parallel: a lost update shows only when the goroutines really overlap,
// which needs every P, not the one left over by other parallel tests.

const budgetGoroutines = 16

// budgetConcurrently runs f on budgetGoroutines goroutines, released
// together so that their calls overlap, and waits for them all.
func budgetConcurrently(f func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range budgetGoroutines {
		wg.Go(func() {
			<-start
			f()
		})
	}
	close(start)
	wg.Wait()
}

func TestTokenBucketConcurrentDepositsThenWithdrawals(t *testing.T) {
	tests := []struct {
		name            string
		ratio           float64
		minPerSecond    float64 // only to raise the capacity: the floor is never asked
		earnMicros      int64
		depositsEach    int
		withdrawalsEach int
	}{
		// 16*62 deposits at 0.1 = 99.2 tokens, just below the capacity.
		{name: "992 deposits at 0.1", ratio: 0.1, earnMicros: 100_000, depositsEach: 62, withdrawalsEach: 10},
		// Many deposits, for contention, well below the capacity.
		{name: "800,000 deposits at 0.00001", ratio: 0.00001, earnMicros: 10, depositsEach: 50_000, withdrawalsEach: 10},
		// A full bucket of 1e7 tokens, then many granted withdrawals.
		{name: "800,000 withdrawals", ratio: 1000, minPerSecond: 1e6, earnMicros: 1e9, depositsEach: 625, withdrawalsEach: 50_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := retry.NewBudget(tt.ratio, tt.minPerSecond)
			budgetConcurrently(func() { budgetDeposit(b, tt.depositsEach, budgetT0) })
			total := budgetGoroutines * int64(tt.depositsEach) * tt.earnMicros
			require.Equal(t, microsBalance(total), b.Balance(), "Balance() after concurrent deposits = %v, want %v",
				b.Balance(), microsBalance(total))

			var granted atomic.Int64
			budgetConcurrently(func() { granted.Add(int64(budgetGrants(b, tt.withdrawalsEach, budgetT0))) })
			want := min(total/1_000_000, budgetGoroutines*int64(tt.withdrawalsEach))
			assert.Equal(t, want, granted.Load(), "%d withdrawals granted, want %d", granted.Load(), want)
			left := total - want*1_000_000
			assert.Equal(t, microsBalance(left), b.Balance(), "Balance() = %v, want %v", b.Balance(), microsBalance(left))
		})
	}
}

func TestTokenBucketConcurrentInterleaved(t *testing.T) {
	const (
		rounds      = 450
		earnMicros  = 13_000 // ratio 0.013
		totalMicros = budgetGoroutines * rounds * earnMicros
	)
	b := retry.NewBudget(0.013, 0)
	var granted atomic.Int64
	budgetConcurrently(func() {
		for range rounds {
			b.Deposit(budgetT0)
			if b.Withdraw(budgetT0) {
				granted.Add(1)
			}
		}
	})
	g := granted.Load()
	assert.LessOrEqual(t, g*1e6, int64(totalMicros), "%d withdrawals granted, more than the %v tokens deposited", g, microsBalance(totalMicros))
	assert.Equal(t, microsBalance(totalMicros-g*1e6), b.Balance(), "Balance() = %v, want deposits - granted = %v",
		b.Balance(), microsBalance(totalMicros-g*1e6))
	// Each goroutine withdraws after each of its deposits and a refusal means
	// the bucket held less than one token, so the bucket ends with less than
	// one token: every whole token deposited was granted.
	assert.Equal(t, int64(totalMicros/1_000_000), g, "%d withdrawals granted, want %d", g, totalMicros/1_000_000)
}

func TestTokenBucketConcurrentDepositsStopAtCapacity(t *testing.T) {
	b := retry.NewBudget(0.7, 0)
	budgetConcurrently(func() { budgetDeposit(b, 1000, budgetT0) })
	assert.Equal(t, 100.0, b.Balance(), "Balance() after 11,200 tokens deposited = %v, want the capacity 100", b.Balance())
}

func TestTokenBucketConcurrentFloor(t *testing.T) {
	b := retry.NewBudget(0, 5)
	var granted atomic.Int64
	budgetConcurrently(func() { granted.Add(int64(budgetGrants(b, 4, budgetT0))) })
	assert.Equal(t, int64(5), granted.Load(), "%d floor withdrawals granted at one instant, want the burst 5", granted.Load())
}

// budgetLog records, in order, what happened and when, relative to start.
type budgetLog struct {
	mu      sync.Mutex
	start   time.Time
	entries []string
}

func newBudgetLog() *budgetLog { return &budgetLog{start: time.Now()} }

func (l *budgetLog) add(what string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf("%s@%v", what, now.Sub(l.start)))
}

func (l *budgetLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if strings.HasPrefix(e, prefix+"@") {
			n++
		}
	}
	return n
}

// budgetSpy is a Budget that logs each call with the time it was given and
// hands it to inner; with no inner, it grants a withdrawal when grant is set.
type budgetSpy struct {
	log   *budgetLog
	inner retry.Budget
	grant bool
}

func (s *budgetSpy) Deposit(now time.Time) {
	s.log.add("deposit", now)
	if s.inner != nil {
		s.inner.Deposit(now)
	}
}

func (s *budgetSpy) Withdraw(now time.Time) bool {
	s.log.add("withdraw", now)
	if s.inner != nil {
		return s.inner.Withdraw(now)
	}
	return s.grant
}

func TestDoBudgetCallOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := newBudgetLog()
		lim := rate.NewLimiter(4, 1)
		require.True(t, lim.Allow()) // the first attempt waits 250ms for the limiter
		err := retry.Do(t.Context(), func(context.Context) error {
			log.add("attempt", time.Now())
			return errBudgetFlaky
		}, retry.Policy{
			MaxAttempts: 3,
			Backoff:     retry.Constant(time.Second),
			Budget:      &budgetSpy{log: log, grant: true},
			Limiter:     retry.RateLimiter(lim),
			Observe: func(_ context.Context, e retry.Event) {
				if e.Retry {
					log.add("onretry", time.Now())
				}
			},
		})
		require.ErrorIs(t, err, retry.ErrExhausted)
		assert.ErrorIs(t, err, errBudgetFlaky)
		want := []string{
			"deposit@250ms", "attempt@250ms", "withdraw@250ms", "onretry@250ms",
			"attempt@1.25s", "withdraw@1.25s", "onretry@1.25s",
			"attempt@2.25s", // the last attempt's failure asks for nothing
		}
		assert.Equal(t, want, log.entries)
		assert.Equal(t, 2250*time.Millisecond, time.Since(log.start))
	})
}

func TestDoBudgetDepositsOnlyWhenAnAttemptStarts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		run      func(ctx context.Context, cancel context.CancelFunc, fn func(context.Context) error, b retry.Budget) error
		wantErr  error
		wantLog  []string
		wantTime time.Duration
	}{
		{
			name: "first-try success deposits once",
			run: func(ctx context.Context, _ context.CancelFunc, fn func(context.Context) error, b retry.Budget) error {
				return retry.Do(ctx, fn, retry.Policy{Budget: b})
			},
			wantLog: []string{"deposit@0s", "attempt@0s"},
		},
		{
			name: "context done before the first attempt",
			run: func(ctx context.Context, cancel context.CancelFunc, fn func(context.Context) error, b retry.Budget) error {
				cancel()
				return retry.Do(ctx, fn, retry.Policy{Budget: b})
			},
			wantErr: context.Canceled,
			wantLog: nil,
		},
		{
			name: "limiter wait past the deadline",
			run: func(ctx context.Context, _ context.CancelFunc, fn func(context.Context) error, b retry.Budget) error {
				ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				lim := rate.NewLimiter(1, 1)
				lim.Allow()
				return retry.Do(ctx, fn, retry.Policy{Budget: b, Limiter: retry.RateLimiter(lim)})
			},
			wantErr: retry.ErrNoTimeLeft,
			wantLog: nil,
		},
		{
			name: "context cancelled during the limiter wait",
			run: func(ctx context.Context, cancel context.CancelFunc, fn func(context.Context) error, b retry.Budget) error {
				lim := rate.NewLimiter(1, 1)
				lim.Allow()
				time.AfterFunc(300*time.Millisecond, cancel)
				return retry.Do(ctx, fn, retry.Policy{Budget: b, Limiter: retry.RateLimiter(lim)})
			},
			wantErr:  context.Canceled,
			wantLog:  nil,
			wantTime: 300 * time.Millisecond,
		},
		{
			name: "deposit after the limiter wait, with the attempt",
			run: func(ctx context.Context, _ context.CancelFunc, fn func(context.Context) error, b retry.Budget) error {
				lim := rate.NewLimiter(1, 1)
				lim.Allow()
				return retry.Do(ctx, fn, retry.Policy{Budget: b, Limiter: retry.RateLimiter(lim)})
			},
			wantLog:  []string{"deposit@1s", "attempt@1s"},
			wantTime: time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				log := newBudgetLog()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				fn := func(context.Context) error { log.add("attempt", time.Now()); return nil }
				err := tt.run(ctx, cancel, fn, &budgetSpy{log: log, grant: true})
				if tt.wantErr == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tt.wantErr)
				}
				assert.Equal(t, tt.wantLog, log.entries)
				assert.Equal(t, tt.wantTime, time.Since(log.start))
			})
		})
	}
}

func TestDoBudgetFirstAttemptNeverRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0.1, 0)
		calls := 0
		err := retry.Do(t.Context(), func(context.Context) error { calls++; return nil }, retry.Policy{Budget: b})
		require.NoError(t, err)
		assert.Equal(t, 1, calls)
		assert.Equal(t, 0.1, b.Balance(), "Balance() after one call = %v, want 0.1", b.Balance())
	})
}

func TestDoBudgetRefusedRetryStopsAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		budget      func() retry.Budget
		wantBalance float64 // for a *TokenBucket, after the call
	}{
		{name: "empty bucket keeps the call's deposit", budget: func() retry.Budget { return retry.NewBudget(0.1, 0) }, wantBalance: 0.1},
		{name: "ratio 0", budget: func() retry.Budget { return retry.NewBudget(0, 0) }},
		{name: "zero TokenBucket", budget: func() retry.Budget { return &retry.TokenBucket{} }},
		{name: "spent floor", budget: func() retry.Budget {
			b := retry.NewBudget(0, 1)
			b.Withdraw(time.Now())
			return b
		}},
		{name: "Budget that refuses", budget: func() retry.Budget { return &budgetSpy{log: newBudgetLog()} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				budget := tt.budget()
				start := time.Now()
				calls, retries := 0, 0
				err := retry.Do(t.Context(), func(context.Context) error { calls++; return errBudgetFlaky }, retry.Policy{
					MaxAttempts: 5,
					Backoff:     retry.Constant(time.Second),
					Budget:      budget,
					Observe: func(_ context.Context, e retry.Event) {
						if e.Retry {
							retries++
						}
					},
				})
				require.ErrorIs(t, err, retry.ErrBudgetExhausted)
				assert.ErrorIs(t, err, errBudgetFlaky, "the last error was lost")
				assert.Zero(t, time.Since(start), "a refused retry slept")
				assert.Equal(t, 1, calls)
				assert.Zero(t, retries, "a refused retry was observed as a retry")
				var rerr *retry.Error
				require.ErrorAs(t, err, &rerr)
				assert.Equal(t, 1, rerr.Attempts)
				assert.Zero(t, rerr.Elapsed)
				assert.Equal(t, errBudgetFlaky, rerr.Last)
				if tb, ok := budget.(*retry.TokenBucket); ok {
					assert.Equal(t, tt.wantBalance, tb.Balance(), "Balance() = %v, want %v", tb.Balance(), tt.wantBalance)
				}
			})
		})
	}
}

func TestDoBudgetRefusalGivesBackLimiterReservation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lim := rate.NewLimiter(1, 1)
		err := retry.Do(t.Context(), func(context.Context) error { return errBudgetFlaky }, retry.Policy{
			Backoff: retry.Constant(0),
			Budget:  retry.NewBudget(0, 0),
			Limiter: retry.RateLimiter(lim),
		})
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		// The first attempt took the only token; the refused retry's
		// reservation (-1) was cancelled.
		assert.Zero(t, lim.TokensAt(time.Now()), "limiter tokens = %v, want 0", lim.TokensAt(time.Now()))
	})
}

func TestDoBudgetTenCallsEarnOneRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0.1, 0)
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Second), Budget: b}
		for range 9 {
			require.NoError(t, retry.Do(t.Context(), func(context.Context) error { return nil }, p))
		}
		require.Equal(t, 0.9, b.Balance())

		start := time.Now()
		calls := 0
		err := retry.Do(t.Context(), func(context.Context) error { calls++; return errBudgetFlaky }, p)
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		assert.ErrorIs(t, err, errBudgetFlaky)
		assert.Equal(t, 2, calls, "the tenth call's deposit pays for exactly one retry")
		assert.Equal(t, time.Second, time.Since(start), "one backoff wait, none after the refusal")
		assert.Zero(t, b.Balance(), "Balance() = %v, want 0", b.Balance())
	})
}

func TestDoBudgetLastAttemptCostsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		maxAttempts   int
		wantWithdraws []string
	}{
		{name: "one attempt", maxAttempts: 1, wantWithdraws: nil},
		{name: "two attempts", maxAttempts: 2, wantWithdraws: []string{"withdraw@0s"}},
		{name: "four attempts", maxAttempts: 4, wantWithdraws: []string{"withdraw@0s", "withdraw@1s", "withdraw@2s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := retry.NewBudget(1, 0)
				budgetDeposit(b, 5, time.Now())
				log := newBudgetLog()
				calls := 0
				err := retry.Do(t.Context(), func(context.Context) error { calls++; return errBudgetFlaky }, retry.Policy{
					MaxAttempts: tt.maxAttempts,
					Backoff:     retry.Constant(time.Second),
					Budget:      &budgetSpy{log: log, inner: b},
				})
				require.ErrorIs(t, err, retry.ErrExhausted)
				assert.ErrorIs(t, err, errBudgetFlaky)
				assert.Equal(t, tt.maxAttempts, calls)
				assert.Equal(t, append([]string{"deposit@0s"}, tt.wantWithdraws...), log.entries)
				want := float64(5 + 1 - (tt.maxAttempts - 1))
				assert.Equal(t, want, b.Balance(), "Balance() = %v, want %v", b.Balance(), want)
			})
		})
	}
}

func TestDoBudgetOtherStopsCostNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		timeout     time.Duration // of the caller's context; 0 = none
		policy      func(p retry.Policy) retry.Policy
		fn          func(ctx context.Context, cancel context.CancelFunc) error
		wantErr     error
		wantElapsed time.Duration
	}{
		{
			name:    "permanent error",
			fn:      func(context.Context, context.CancelFunc) error { return retry.Permanent(errBudgetFlaky) },
			wantErr: retry.ErrNotRetryable,
		},
		{
			name: "classifier says stop",
			policy: func(p retry.Policy) retry.Policy {
				p.Classifier = func(error) retry.Decision { return retry.Stop }
				return p
			},
			wantErr: retry.ErrNotRetryable,
		},
		{
			name: "single attempt",
			policy: func(p retry.Policy) retry.Policy {
				p.MaxAttempts = 1
				return p
			},
			wantErr: retry.ErrExhausted,
		},
		{
			name:    "backoff past the deadline",
			timeout: 500 * time.Millisecond,
			wantErr: retry.ErrNoTimeLeft,
		},
		{
			name:    "limiter delay past the deadline",
			timeout: 500 * time.Millisecond,
			policy: func(p retry.Policy) retry.Policy {
				p.Backoff = retry.Constant(0)
				p.Limiter = retry.RateLimiter(rate.NewLimiter(1, 1))
				return p
			},
			wantErr: retry.ErrNoTimeLeft,
		},
		{
			name: "MinAttemptTime does not fit after the wait",
			policy: func(p retry.Policy) retry.Policy {
				p.MinAttemptTime = 59500 * time.Millisecond // fits the first attempt, not one after a 1s wait
				return p
			},
			timeout: time.Minute,
			wantErr: retry.ErrNoTimeLeft,
		},
		{
			name: "server delay above MaxRetryAfter",
			fn: func(context.Context, context.CancelFunc) error {
				return retry.RetryAfter(errBudgetFlaky, 10*time.Minute)
			},
			wantErr: retry.ErrServerDelay,
		},
		{
			name:    "caller cancels during the attempt",
			fn:      func(_ context.Context, cancel context.CancelFunc) error { cancel(); return errBudgetFlaky },
			wantErr: context.Canceled,
		},
		{
			name:    "caller's deadline comes during the attempt",
			timeout: 2 * time.Second,
			fn: func(context.Context, context.CancelFunc) error {
				time.Sleep(2 * time.Second)
				return errBudgetFlaky
			},
			wantErr:     context.DeadlineExceeded,
			wantElapsed: 2 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tt.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				b := retry.NewBudget(1, 0)
				budgetDeposit(b, 2, time.Now())
				log := newBudgetLog()
				p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Second), Budget: &budgetSpy{log: log, inner: b}}
				if tt.policy != nil {
					p = tt.policy(p)
				}
				fn := func(context.Context) error { return errBudgetFlaky }
				if tt.fn != nil {
					fn = func(ctx context.Context) error { return tt.fn(ctx, cancel) }
				}

				err := retry.Do(ctx, fn, p)
				require.ErrorIs(t, err, tt.wantErr)
				assert.ErrorIs(t, err, errBudgetFlaky, "the last error was lost")
				assert.Zero(t, log.count("withdraw"), "a retry refused for another reason asked the budget: %v", log.entries)
				assert.Equal(t, 3.0, b.Balance(), "Balance() = %v, want 3 (2 held + this call's deposit)", b.Balance())
				assert.Equal(t, tt.wantElapsed, time.Since(log.start))
			})
		})
	}
}

func TestDoBudgetSharedByConcurrentCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const calls = 20
		b := retry.NewBudget(0.1, 0)
		release := make(chan struct{})
		errs := make([]error, calls)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				attempts := 0
				errs[i] = retry.Do(t.Context(), func(context.Context) error {
					attempts++
					if attempts == 1 {
						<-release
						return errBudgetFlaky
					}
					return nil
				}, retry.Policy{Backoff: retry.Constant(time.Second), Budget: b})
			})
		}
		synctest.Wait() // every call has deposited and is in its first attempt
		require.Equal(t, 2.0, b.Balance(), "Balance() with %d calls in flight = %v, want 2", calls, b.Balance())
		close(release)
		wg.Wait()

		succeeded, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				succeeded++
			case errors.Is(err, retry.ErrBudgetExhausted):
				refused++
			}
		}
		assert.Equal(t, 2, succeeded, "calls retried")
		assert.Equal(t, calls-2, refused, "calls refused by the budget")
		assert.Zero(t, b.Balance(), "Balance() = %v, want 0", b.Balance())
		assert.Equal(t, time.Second, time.Since(start), "the retried calls waited one backoff")
	})
}

func TestDoBudgetFloorLetsQuietCallersRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0, 1) // nothing earned: only the floor, 1 per second
		p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(400 * time.Millisecond), Budget: b}
		start := time.Now()
		calls := 0
		fn := func(context.Context) error { calls++; return errBudgetFlaky }

		err := retry.Do(t.Context(), fn, p)
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		assert.Equal(t, 2, calls, "one retry from the floor, the next refused")
		assert.Equal(t, 400*time.Millisecond, time.Since(start))

		time.Sleep(600 * time.Millisecond) // the floor refills one token a second after its grant
		calls = 0
		err = retry.Do(t.Context(), fn, p)
		require.ErrorIs(t, err, retry.ErrBudgetExhausted)
		assert.Equal(t, 2, calls, "one retry from the refilled floor")
		assert.Equal(t, 1400*time.Millisecond, time.Since(start))
		assert.Zero(t, b.Balance())
	})
}

// FuzzTokenBucket drives a TokenBucket built from any ratio and floor with a
// sequence of deposits and withdrawals at moving times, and checks the
// invariants that hold for every input.
func FuzzTokenBucket(f *testing.F) {
	f.Add(0.1, 0.0, []byte{0, 0, 0, 1, 1})
	f.Add(0.3, 2.0, []byte{1, 1, 1, 0xff, 1, 0, 1})
	f.Add(math.NaN(), math.Inf(1), []byte{1, 1, 0})
	f.Add(math.Inf(1), math.NaN(), []byte{0, 0, 1, 1, 1})
	f.Add(-1.0, -1.0, []byte{0, 1})
	f.Add(1000.0, 1e6, []byte{0, 0x81, 0x7f, 1})
	f.Add(0.0000005, 0.5, []byte{0, 0, 1, 0x41})
	f.Fuzz(func(t *testing.T, ratio, minPerSecond float64, ops []byte) {
		b := retry.NewBudget(ratio, minPerSecond)
		if len(ops) > 256 {
			ops = ops[:256]
		}
		now := budgetT0
		for _, op := range ops {
			// The high bits move the clock, forwards or back.
			now = now.Add(time.Duration(int8(op)>>1) * 100 * time.Millisecond)
			before := b.Balance()
			if op&1 == 0 {
				b.Deposit(now)
				if after := b.Balance(); after < before {
					t.Fatalf("Deposit lowered Balance() from %v to %v", before, after)
				}
			} else {
				granted := b.Withdraw(now)
				after := b.Balance()
				switch {
				case !granted && before >= 1:
					t.Fatalf("Withdraw refused with Balance() = %v", before)
				case !granted && after != before:
					t.Fatalf("a refused Withdraw changed Balance() from %v to %v", before, after)
				case granted && before >= 1 && after != microsBalance(int64(math.Round(before*1e6))-1e6):
					t.Fatalf("Withdraw took Balance() from %v to %v, want one token less", before, after)
				case granted && before < 1 && after != before:
					t.Fatalf("a floor grant changed Balance() from %v to %v", before, after)
				}
			}
			if got := b.Balance(); !(got >= 0 && got <= 1e7) {
				t.Fatalf("Balance() = %v, want within [0, 1e7]", got)
			}
		}
	})
}

// mutexBucket is the bucket part of TokenBucket guarded by a mutex instead of
// a compare-and-swap loop, to compare the two under contention.
type mutexBucket struct {
	mu       sync.Mutex
	micros   int64
	earn     int64
	capacity int64
}

func (b *mutexBucket) Deposit(time.Time) {
	b.mu.Lock()
	b.micros = min(b.micros+b.earn, b.capacity)
	b.mu.Unlock()
}

func (b *mutexBucket) Withdraw(time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.micros < 1e6 {
		return false
	}
	b.micros -= 1e6
	return true
}

// BenchmarkBudget measures one call's Deposit plus one retry's Withdraw. At
// ratio 1 every Withdraw is granted from the bucket (each goroutine withdraws
// after depositing), so this is the lock-free path; Floor is the path of an
// empty bucket, which asks the floor's rate.Limiter.
func BenchmarkBudget(b *testing.B) {
	budgets := []struct {
		name string
		new  func() retry.Budget
	}{
		{name: "TokenBucket", new: func() retry.Budget { return retry.NewBudget(1, 0) }},
		{name: "Mutex", new: func() retry.Budget { return &mutexBucket{earn: 1e6, capacity: 100e6} }},
		{name: "Floor", new: func() retry.Budget { return retry.NewBudget(0, 1e6) }},
	}
	now := budgetT0
	for _, bb := range budgets {
		b.Run(bb.name+"/serial", func(b *testing.B) {
			budget := bb.new()
			b.ReportAllocs()
			for b.Loop() {
				budget.Deposit(now)
				budget.Withdraw(now)
			}
		})
		b.Run(bb.name+"/parallel", func(b *testing.B) {
			budget := bb.new()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					budget.Deposit(now)
					budget.Withdraw(now)
				}
			})
		})
		// Healthy traffic: every call deposits into a full bucket and none
		// retries. This is the path nearly every call takes.
		b.Run(bb.name+"/parallel-full", func(b *testing.B) {
			budget := bb.new()
			for range 1000 {
				budget.Deposit(now)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					budget.Deposit(now)
				}
			})
		})
		// Calls do work between their visits to the budget: with some, the
		// budget is contended now and then, not on every instruction.
		b.Run(bb.name+"/parallel-with-work", func(b *testing.B) {
			budget := bb.new()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				x := uint64(1)
				for pb.Next() {
					budget.Deposit(now)
					x = budgetWork(x)
					budget.Withdraw(now)
					x = budgetWork(x)
				}
				budgetSink.Add(x)
			})
		})
	}
}

func BenchmarkDoBudgetRefusal(b *testing.B) {
	ctx := context.Background()
	budget := retry.NewBudget(0, 0)
	p := retry.Policy{Backoff: retry.Constant(0), Budget: budget}
	fn := func(context.Context) error { return errBudgetFlaky }
	b.ReportAllocs()
	for b.Loop() {
		// A type assertion, not errors.Is, which would count Unwrap's allocation.
		err := retry.Do(ctx, fn, p)
		if e, ok := err.(*retry.Error); !ok || e.Reason != retry.ErrBudgetExhausted {
			b.Fatalf("Do = %v, want ErrBudgetExhausted", err)
		}
	}
}

var budgetSink atomic.Uint64

// budgetWork stands for the work a call does between its visits to the
// budget: about 100ns of arithmetic that touches no shared memory.
func budgetWork(x uint64) uint64 {
	for range 64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}
