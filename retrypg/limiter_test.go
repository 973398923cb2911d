package retrypg

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// The store keeps its schedule as fleet.Store says, on a real PostgreSQL.
func TestLimiterStore(t *testing.T) {
	t.Parallel()
	pool := newPool(t, limiterDB(t))
	fleettest.TestStore(t, func(t *testing.T) fleet.Store { return &store{pool: pool, name: limitName(t)} })
}

// The table is created on first use, in the first schema of the search
// path, by the statement LimiterSchema holds; and a row holds the limit.
func TestLimiterCreatesItsTable(t *testing.T) {
	t.Parallel()
	dsn := limiterDB(t)
	admin := newPool(t, dsn)
	schema := "retrypg_" + strings.ToLower(limitName(t)[len(limitName(t))-8:])
	_, err := admin.Exec(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// One a second: an interval wider than the bounds on the server's
	// clock can be here, so that the booking leaves no pad after its slot.
	lim := must(t)(NewLimiter(pool, "provider", 1, 1, &fleet.Options{Timeout: 10 * time.Second}))
	_, err = lim.Reserve(t.Context(), time.Now())
	require.NoError(t, err)
	var name string
	var tat, at, seq int64
	require.NoError(t, admin.QueryRow(t.Context(), "SELECT name, tat, at, seq FROM "+schema+".retry_limiter").Scan(&name, &tat, &at, &seq))
	assert.Equal(t, "provider", name)
	// One slot booked at the server's now, or as much later as the
	// answers took to come back (a slot asked for no earlier, so that it
	// has not passed when the answer comes): the end is one interval on.
	assert.GreaterOrEqual(t, tat-at, int64(time.Second))
	assert.Less(t, tat-at, int64(time.Second+50*time.Millisecond))
	assert.InDelta(t, float64(at/1000), float64(seq), 0, "the counter starts at the server's time in microseconds")
}

// Four real processes, 20 goroutines each, share one limit of 100/s with a
// burst of 10: over any second they start at most the rate and the burst,
// and a late wake's allowance (a burst: see the Redis test), and they use
// the rate.
func TestLimiterAcrossProcesses(t *testing.T) {
	dsn := limiterDB(t)
	d := fleettest.Drill{Procs: 4, Goroutines: 20, Duration: 4 * time.Second, Name: limitName(t), Rate: 100, Burst: 10, Timeout: time.Second}
	res := d.Run(t, nil, "RETRY_POSTGRES_URL="+dsn)
	t.Log(res)
	assert.LessOrEqual(t, res.MostWithin(time.Second), 100+10+10, "attempts in a second")
	assert.GreaterOrEqual(t, len(res.Starts), 4*100*9/10, "the rate is used")
	assert.LessOrEqual(t, len(res.Starts), 4*100+10+10)
	assert.Empty(t, res.Errors)
}

// PostgreSQL taken away mid-run (every connection cut, new ones refused,
// as a stopped cluster does) and brought back: the limiter fails closed
// meanwhile, with a reason that says so, and no attempt starts but those
// booked before; once it is back, the fleet shares it again.
//
// The bounds do not depend on the machine's speed: a round trip may take a
// second (a new connection on a loaded machine forks a backend, which can
// take longer than the default 100ms; the outage itself fails at once, with
// connections refused), and the fleet has 4s after the restart to make a
// quarter of its rate. On an idle machine it is back within a few tens of
// milliseconds.
func TestLimiterFailsClosedWhenPostgresStops(t *testing.T) {
	px, dsn := newProxy(t, limiterDB(t))
	d := fleettest.Drill{Procs: 3, Goroutines: 10, Duration: 8 * time.Second, Name: limitName(t), Rate: 100, Burst: 10, Timeout: time.Second}
	res := d.Run(t, func(time.Time) {
		time.Sleep(2 * time.Second)
		px.stop()
		time.Sleep(2 * time.Second)
		px.start()
	}, "RETRY_POSTGRES_URL="+dsn)
	t.Log(res)
	t.Logf("first attempt %v after PostgreSQL came back", firstAfter(res, 4*time.Second))
	assert.Zero(t, res.Between(2500*time.Millisecond, 4*time.Second), "no attempt while PostgreSQL is away")
	assert.GreaterOrEqual(t, res.Between(4*time.Second, 8*time.Second), 100, "PostgreSQL is back")
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

// firstAfter returns how long after from the first attempt of res started,
// or -1 if none did.
func firstAfter(res fleettest.Result, from time.Duration) time.Duration {
	for _, s := range res.Starts {
		if s >= from {
			return s - from
		}
	}
	return -1
}

// With Fallback 1/3 in each of 3 processes, the calls go on while
// PostgreSQL is away, at a third of the rate each: never unlimited.
func TestLimiterFallsBackWhenPostgresStops(t *testing.T) {
	px, dsn := newProxy(t, limiterDB(t))
	d := fleettest.Drill{Procs: 3, Goroutines: 10, Duration: 6 * time.Second, Name: limitName(t), Rate: 99, Burst: 9, Fallback: 1.0 / 3}
	res := d.Run(t, func(time.Time) {
		time.Sleep(2 * time.Second)
		px.stop()
		time.Sleep(2 * time.Second)
		px.start()
	}, "RETRY_POSTGRES_URL="+dsn)
	t.Log(res)
	down := res.Between(2500*time.Millisecond, 4*time.Second)
	assert.GreaterOrEqual(t, down, 99*3/2*8/10, "the calls went on at the fallback's share")
	assert.LessOrEqual(t, down, 99*3/2+3*3+10)
	assert.LessOrEqual(t, res.MostWithin(time.Second), 99+9+9+3*3)
	assert.Empty(t, res.Errors)
}

// In one process: a closed pool stops a call with fleet.ErrUnavailable and
// pgx's error, at once.
func TestLimiterErrorWhenPoolCloses(t *testing.T) {
	t.Parallel()
	pool := newPool(t, limiterDB(t))
	// A store timeout far above the default 100ms: the first booking, on a
	// new connection, must not time out on a loaded machine (the race
	// detector, other tests); a closed pool fails at once whatever it is.
	lim := must(t)(NewLimiter(pool, limitName(t), 100, 1, &fleet.Options{Timeout: 10 * time.Second}))
	fn := func(context.Context) error { return nil }
	require.NoError(t, retry.Do(t.Context(), fn, retry.Policy{Limiter: lim}))
	pool.Close()
	err := retry.Do(t.Context(), fn, retry.Policy{Limiter: lim})
	require.Error(t, err)
	assert.ErrorIs(t, err, fleet.ErrUnavailable)
	assert.ErrorContains(t, err, "closed pool")
}

// A near-zero rate admits its burst and then nothing: its interval, beyond
// the int64 range of a Duration, must not wrap to a negative one, on the
// Limiter's side or in the statement (where bigint would overflow).
func TestLimiterNearZeroRate(t *testing.T) {
	t.Parallel()
	pool := newPool(t, limiterDB(t))
	lim := must(t)(NewLimiter(pool, limitName(t), rate.Every(math.MaxInt64), 2, &fleet.Options{Timeout: 10 * time.Second}))
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
	pool, err := pgxpool.New(t.Context(), "postgres://app@127.0.0.1:1/app") // never dialled
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tests := []struct {
		name  string
		pool  *pgxpool.Pool
		limit string
		r     rate.Limit
		burst int
		want  string
	}{
		{"nil pool", nil, "provider", 10, 1, "retrypg: NewLimiter: pool is nil"},
		{"empty name", pool, "", 10, 1, "retrypg: NewLimiter: the limit's name is empty"},
		{"NUL in name", pool, "a\x00b", 10, 1, `retrypg: NewLimiter: the limit's name "a\x00b" is not text PostgreSQL can hold`},
		{"bad UTF-8", pool, "a\xffb", 10, 1, "is not text PostgreSQL can hold"},
		{"zero rate", pool, "provider", 0, 1, "fleet: rate 0 admits no attempt"},
		{"zero burst", pool, "provider", 10, 0, "fleet: burst 0 admits no attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := NewLimiter(tt.pool, tt.limit, tt.r, tt.burst, nil)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, lim)
		})
	}
	_, err = NewLimiter(pool, "provider", 10, 1, &fleet.Options{Fallback: 3})
	assert.ErrorContains(t, err, "fleet: Options.Fallback 3 is not a share")
}
