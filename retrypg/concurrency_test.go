package retrypg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// The slots keep their leases as fleet.SlotStore says, on a real
// PostgreSQL.
func TestSlotStore(t *testing.T) {
	t.Parallel()
	pool := newPool(t, limiterDB(t))
	fleettest.TestSlotStore(t, func(t *testing.T) fleet.SlotStore { return &slots{pool: pool, name: limitName(t)} })
}

// The table is created on first use, in the first schema of the search
// path, by the statement ConcurrencySchema holds; a row is a lease, which
// expires on the server's clock; a release deletes it. The lease is taken
// at READ COMMITTED even where the session's default is SERIALIZABLE.
func TestConcurrencyCreatesItsTable(t *testing.T) {
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
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	c := mustConcurrency(t)(NewConcurrency(pool, "provider", 2, 10*time.Second, &fleet.Options{Timeout: 10 * time.Second}))
	release, err := c.Acquire(t.Context(), time.Time{})
	require.NoError(t, err)
	var name, id string
	var left float64
	require.NoError(t, admin.QueryRow(t.Context(), "SELECT name, id, extract(epoch FROM expires_at - clock_timestamp()) FROM "+schema+".retry_slots").Scan(&name, &id, &left))
	assert.Equal(t, "provider", name)
	assert.NotEmpty(t, id)
	assert.InDelta(t, 10, left, 1, "expires a lease from the server's now")
	release(0, nil)
	require.Eventually(t, func() bool {
		var n int
		return admin.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".retry_slots").Scan(&n) == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "released")
}

// Three real processes of 4 goroutines each take slots of a limit of 6,
// while a fourth, holding 2, is killed (SIGKILL): never more than 6 in
// flight at once, never more than 4 while the victim's leases run, and
// all 6 again within a lease and a second of the kill.
func TestConcurrencyAcrossProcesses(t *testing.T) {
	dsn := limiterDB(t)
	d := fleettest.SlotDrill{Procs: 3, Goroutines: 4, Duration: 4500 * time.Millisecond, Name: limitName(t),
		Limit: 6, Lease: 1500 * time.Millisecond, Hold: 20 * time.Millisecond, Victim: 2, KillAt: time.Second}
	res := d.Run(t, "RETRY_POSTGRES_URL="+dsn)
	t.Log(res)
	res.Check(t, d.Lease+time.Second)
}

// PostgreSQL taken away (every connection cut, new ones refused): an
// Acquire fails closed, with fleet.ErrUnavailable, within a bound of the
// timeout; with Fallback it goes on, on its share.
func TestConcurrencyWhenPostgresStops(t *testing.T) {
	px, dsn := newProxy(t, limiterDB(t))
	pool := newPool(t, dsn)
	opts := func(fallback float64) *fleet.Options {
		// A timeout far above the default for the first lease, on a new
		// connection on a loaded machine; the outage fails at once.
		return &fleet.Options{Timeout: 5 * time.Second, Fallback: fallback}
	}
	closed := mustConcurrency(t)(NewConcurrency(pool, limitName(t), 4, time.Second, opts(0)))
	open := mustConcurrency(t)(NewConcurrency(pool, limitName(t), 4, time.Second, opts(0.5)))
	for _, c := range []*fleet.Concurrency{closed, open} {
		release, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		release(0, nil)
	}
	time.Sleep(100 * time.Millisecond) // the releases' round trips
	px.stop()

	start := time.Now()
	_, err := closed.Acquire(t.Context(), time.Time{})
	assert.ErrorIs(t, err, fleet.ErrUnavailable)
	assert.Less(t, time.Since(start), 2*time.Second, "connections refused fail at once")
	t.Log(err)

	var releases []func(time.Duration, error)
	for i := range 2 {
		release, err := open.Acquire(t.Context(), time.Time{})
		require.NoError(t, err, "fallback slot %d", i)
		releases = append(releases, release)
	}
	_, err = open.Acquire(t.Context(), time.Now().Add(300*time.Millisecond))
	assert.ErrorIs(t, err, retry.ErrNoSlot, "the fallback's share of 4 is 2")
	for _, r := range releases {
		r(0, nil)
	}
}

// NewConcurrency refuses what would make every call fail, or silently share
// a limit with every caller who forgot its name, with an error that names
// the field.
func TestNewConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://app@127.0.0.1:1/app") // never dialled
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tests := []struct {
		name  string
		pool  *pgxpool.Pool
		limit string
		n     int
		lease time.Duration
		want  string
	}{
		{"nil pool", nil, "provider", 10, time.Second, "retrypg: NewConcurrency: pool is nil"},
		{"empty name", pool, "", 10, time.Second, "retrypg: NewConcurrency: the limit's name is empty"},
		{"NUL in name", pool, "a\x00b", 10, time.Second, "is not text PostgreSQL can hold"},
		{"zero limit", pool, "provider", 0, time.Second, "fleet: limit 0 admits no attempt"},
		{"negative lease", pool, "provider", 10, -time.Second, "fleet: lease -1s is too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewConcurrency(tt.pool, tt.limit, tt.n, tt.lease, nil)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, c)
		})
	}
}

// mustConcurrency returns a function that returns a constructor's value,
// or ends the test on its error.
func mustConcurrency(t testing.TB) func(*fleet.Concurrency, error) *fleet.Concurrency {
	return func(c *fleet.Concurrency, err error) *fleet.Concurrency {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// BenchmarkConcurrency is one Acquire and its release on a real
// PostgreSQL: with a limit of 1, each Acquire waits for the previous
// release's round trip (two round trips an iteration); in parallel, with a
// limit above the goroutines, the releases overlap the next Acquires, and
// the leases of the name queue on its advisory lock.
func BenchmarkConcurrency(b *testing.B) {
	pool := newPool(b, limiterDB(b))
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		c := mustConcurrency(b)(NewConcurrency(pool, limitName(b), 1, 10*time.Second, &fleet.Options{Timeout: 5 * time.Second}))
		b.ReportAllocs()
		for b.Loop() {
			release, err := c.Acquire(ctx, time.Time{})
			if err != nil {
				b.Fatal(err)
			}
			release(0, nil)
		}
		fleettest.ReportLoad(b)
	})
	b.Run("parallel", func(b *testing.B) {
		c := mustConcurrency(b)(NewConcurrency(pool, limitName(b), 1024, 10*time.Second, &fleet.Options{Timeout: 5 * time.Second}))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				release, err := c.Acquire(ctx, time.Time{})
				if err != nil {
					b.Error(err)
					return
				}
				release(0, nil)
			}
		})
		fleettest.ReportLoad(b)
	})
}
