package retryredis

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// The slots keep their leases as fleet.SlotStore says, on a real Redis and
// on miniredis (the scripts use nothing only one server has).
func TestSlotStore(t *testing.T) {
	t.Parallel()
	c := newClient(t, redisURL(t))
	fleettest.TestSlotStore(t, func(t *testing.T) fleet.SlotStore { return &slots{client: c, key: "retry:slots:" + uniqueName(t)} })
}

func TestSlotStoreOnMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	fleettest.TestSlotStore(t, func(t *testing.T) fleet.SlotStore { return &slots{client: c, key: "retry:slots:" + uniqueName(t)} })
}

// The key is a sorted set of lease ids, and expires a minute after its
// last lease would.
func TestSlotsKey(t *testing.T) {
	t.Parallel()
	rdb := newClient(t, redisURL(t))
	name := uniqueName(t)
	c := mustConcurrency(t)(NewConcurrency(rdb, name, 3, 10*time.Second, nil))
	release, err := c.Acquire(t.Context(), time.Time{})
	require.NoError(t, err)
	key := "retry:slots:" + name
	members, err := rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1)
	now, err := rdb.Time(t.Context()).Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(now.Add(10*time.Second).UnixMicro()), members[0].Score, float64(time.Second.Microseconds()), "scored by its expiry, in microseconds on Redis's clock")
	ttl, err := rdb.PTTL(t.Context(), key).Result()
	require.NoError(t, err)
	assert.InDelta(t, (10*time.Second + time.Minute).Seconds(), ttl.Seconds(), 1)
	release(0, nil)
	require.Eventually(t, func() bool { return rdb.ZCard(t.Context(), key).Val() == 0 }, 5*time.Second, 10*time.Millisecond, "released")
}

// Three real processes of 4 goroutines each take slots of a limit of 6,
// while a fourth, holding 2, is killed (SIGKILL): never more than 6 in
// flight at once, never more than 4 while the victim's leases run, and
// all 6 again within a lease and a second of the kill.
func TestConcurrencyAcrossProcesses(t *testing.T) {
	url := redisURL(t)
	d := fleettest.SlotDrill{Procs: 3, Goroutines: 4, Duration: 4500 * time.Millisecond, Name: uniqueName(t),
		Limit: 6, Lease: 1500 * time.Millisecond, Hold: 20 * time.Millisecond, Victim: 2, KillAt: time.Second}
	res := d.Run(t, "RETRY_REDIS_URL="+url)
	t.Log(res)
	res.Check(t, d.Lease+time.Second)
}

// Redis killed: an Acquire fails closed, with fleet.ErrUnavailable, within
// a bound of the timeout; with Fallback it goes on, on its share.
func TestConcurrencyWhenRedisDies(t *testing.T) {
	srv := startServer(t)
	rdb := newClient(t, srv.url())
	closed := mustConcurrency(t)(NewConcurrency(rdb, uniqueName(t), 4, time.Second, nil))
	open := mustConcurrency(t)(NewConcurrency(rdb, uniqueName(t), 4, time.Second, &fleet.Options{Fallback: 0.5}))
	for _, c := range []*fleet.Concurrency{closed, open} {
		release, err := c.Acquire(t.Context(), time.Time{})
		require.NoError(t, err)
		release(0, nil)
	}
	time.Sleep(100 * time.Millisecond) // the releases' round trips
	srv.kill()

	start := time.Now()
	_, err := closed.Acquire(t.Context(), time.Time{})
	assert.ErrorIs(t, err, fleet.ErrUnavailable)
	assert.Less(t, time.Since(start), 2*time.Second, "bounded by the timeout (100ms), on a loaded machine")
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
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { client.Close() })
	tests := []struct {
		name   string
		client redis.Scripter
		limit  string
		n      int
		lease  time.Duration
		want   string
	}{
		{"nil client", nil, "provider", 10, time.Second, "retryredis: NewConcurrency: client is nil"},
		{"nil *redis.Client", (*redis.Client)(nil), "provider", 10, time.Second, "retryredis: NewConcurrency: client is nil"},
		{"empty name", client, "", 10, time.Second, "retryredis: NewConcurrency: the limit's name is empty"},
		{"zero limit", client, "provider", 0, time.Second, "fleet: limit 0 admits no attempt"},
		{"zero lease", client, "provider", 10, 0, "fleet: lease 0s is too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewConcurrency(tt.client, tt.limit, tt.n, tt.lease, nil)
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

// BenchmarkConcurrency is one Acquire and its release on a real Redis: with
// a limit of 1, each Acquire waits for the previous release's round trip
// (two round trips an iteration); in parallel, with a limit above the
// goroutines, the releases overlap the next Acquires.
func BenchmarkConcurrency(b *testing.B) {
	rdb := newClient(b, redisURL(b))
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		c := mustConcurrency(b)(NewConcurrency(rdb, uniqueName(b), 1, 10*time.Second, &fleet.Options{Timeout: 5 * time.Second}))
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
		c := mustConcurrency(b)(NewConcurrency(rdb, uniqueName(b), 1024, 10*time.Second, &fleet.Options{Timeout: 5 * time.Second}))
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
