package retryredis

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// Four real processes, 20 goroutines each, that want every attempt they can
// get, share one limit of 100/s with a burst of 10: over any second they
// start at most the rate and the burst, and a late wake's allowance (the
// loop books again past a booking's Slack, a burst's worth), and they use
// the rate.
func TestLimiterAcrossProcesses(t *testing.T) {
	url := redisURL(t)
	d := fleettest.Drill{Procs: 4, Goroutines: 20, Duration: 4 * time.Second, Name: uniqueName(t), Rate: 100, Burst: 10, Timeout: time.Second}
	res := d.Run(t, nil, "RETRY_REDIS_URL="+url)
	t.Log(res)
	assert.LessOrEqual(t, res.MostWithin(time.Second), 100+10+10, "attempts in a second")
	assert.GreaterOrEqual(t, len(res.Starts), 4*100*9/10, "the rate is used")
	assert.LessOrEqual(t, len(res.Starts), 4*100+10+10)
	assert.Empty(t, res.Errors)
}

// Redis killed mid-run (SIGKILL) and started again: the limiter fails
// closed meanwhile, with a reason that says so, and no attempt starts but
// those booked before; once Redis is back, the fleet shares it again.
//
// The bounds do not depend on the machine's speed: a round trip may take a
// second (the outage itself fails at once, with connections refused), and
// the fleet has 4s after the restart to make a quarter of its rate.
func TestLimiterFailsClosedWhenRedisDies(t *testing.T) {
	srv := startServer(t)
	d := fleettest.Drill{Procs: 3, Goroutines: 10, Duration: 8 * time.Second, Name: uniqueName(t), Rate: 100, Burst: 10, Timeout: time.Second}
	res := d.Run(t, func(time.Time) {
		time.Sleep(2 * time.Second)
		srv.kill()
		time.Sleep(2 * time.Second)
		srv.start()
	}, "RETRY_REDIS_URL="+srv.url())
	t.Log(res)
	// 30 goroutines hold 30 slots booked ahead (0.3s at 100/s): they may
	// still start after the kill.
	for _, s := range res.Starts {
		if s >= 4*time.Second {
			t.Logf("first attempt %v after Redis came back", s-4*time.Second)
			break
		}
	}
	assert.Zero(t, res.Between(2500*time.Millisecond, 4*time.Second), "no attempt while Redis is down")
	assert.GreaterOrEqual(t, res.Between(4*time.Second, 8*time.Second), 100, "Redis is back")
	assert.LessOrEqual(t, res.MostWithin(time.Second), 100+10+10)
	unavailable := 0
	for e, n := range res.Errors {
		if strings.HasPrefix(e, "fleet: limiter store unavailable: ") {
			unavailable += n
		} else {
			t.Errorf("%d calls stopped with %q", n, e)
		}
	}
	assert.Positive(t, unavailable, "calls stopped with the store's reason")
}

// With Fallback 1/3 in each of 3 processes, the calls go on while Redis is
// down, at a third of the rate each: never unlimited.
func TestLimiterFallsBackWhenRedisDies(t *testing.T) {
	srv := startServer(t)
	d := fleettest.Drill{Procs: 3, Goroutines: 10, Duration: 6 * time.Second, Name: uniqueName(t), Rate: 99, Burst: 9, Fallback: 1.0 / 3}
	res := d.Run(t, func(time.Time) {
		time.Sleep(2 * time.Second)
		srv.kill()
		time.Sleep(2 * time.Second)
		srv.start()
	}, "RETRY_REDIS_URL="+srv.url())
	t.Log(res)
	down := res.Between(2500*time.Millisecond, 4*time.Second)
	assert.GreaterOrEqual(t, down, 99*3/2*8/10, "the calls went on at the fallback's share")
	assert.LessOrEqual(t, down, 99*3/2+3*3+10)
	assert.LessOrEqual(t, res.MostWithin(time.Second), 99+9+9+3*3, "never much above the limit: the fallback books after the schedule, and the store after the fallback")
	assert.Empty(t, res.Errors)
}

// In one process: a killed Redis stops a call with fleet.ErrUnavailable and
// the client's error, within the timeout.
func TestLimiterErrorWhenRedisDies(t *testing.T) {
	srv := startServer(t)
	lim := must(t)(NewLimiter(newClient(t, srv.url()), uniqueName(t), 100, 1, nil))
	fn := func(context.Context) error { return nil }
	require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{Limiter: lim}))
	srv.kill()
	start := time.Now()
	err := retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
	require.Error(t, err)
	assert.ErrorIs(t, err, fleet.ErrUnavailable)
	assert.Less(t, time.Since(start), 2*time.Second, "bounded by the timeout (100ms), on a loaded machine")
	var re *retry.Error
	require.True(t, errors.As(err, &re))
	assert.Zero(t, re.Attempts)
	t.Log(err)
}

// A near-zero rate admits its burst and then nothing: its interval, beyond
// the int64 range of a Duration, must not wrap to a negative one, on the
// Limiter's side or in the script.
func TestLimiterNearZeroRate(t *testing.T) {
	t.Parallel()
	lim := must(t)(NewLimiter(newClient(t, redisURL(t)), uniqueName(t), rate.Every(math.MaxInt64), 2, &fleet.Options{Timeout: 10 * time.Second}))
	now := time.Now()
	started := 0
	for i := range 10 {
		r, err := lim.Reserve(t.Context(), now)
		require.NoError(t, err, "booking %d", i)
		if !r.Start.After(now.Add(time.Hour)) {
			started++
		}
	}
	assert.Equal(t, 2, started, "bookings that may start within the hour: the burst")
}

// NewLimiter refuses what would make every call fail, or silently share a
// limit with every caller who forgot its name, with an error that names
// the field.
func TestNewLimiterBadInput(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { client.Close() })
	tests := []struct {
		name   string
		client redis.Scripter
		limit  string
		r      rate.Limit
		burst  int
		want   string
	}{
		{"nil client", nil, "provider", 10, 1, "retryredis: NewLimiter: client is nil"},
		{"nil *redis.Client", (*redis.Client)(nil), "provider", 10, 1, "retryredis: NewLimiter: client is nil"},
		{"empty name", client, "", 10, 1, "retryredis: NewLimiter: the limit's name is empty"},
		{"negative rate", client, "provider", -1, 1, "fleet: rate -1 admits no attempt"},
		{"zero burst", client, "provider", 10, 0, "fleet: burst 0 admits no attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := NewLimiter(tt.client, tt.limit, tt.r, tt.burst, nil)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, lim)
		})
	}
	_, err := NewLimiter(client, "provider", 10, 1, &fleet.Options{Timeout: -time.Second})
	assert.ErrorContains(t, err, "fleet: Options.Timeout -1s is negative")
}
