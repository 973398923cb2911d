package retryredis

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// The store keeps its schedule as fleet.Store says, on a real Redis.
func TestStore(t *testing.T) {
	t.Parallel()
	c := newClient(t, redisURL(t))
	fleettest.TestStore(t, func(t *testing.T) fleet.Store { return &store{client: c, key: "retry:limiter:" + uniqueName(t)} })
}

// The same rules on miniredis, an implementation of Redis in Go: the script
// uses nothing that only one server has. (Correctness only: miniredis says
// nothing about timings.)
func TestStoreOnMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	fleettest.TestStore(t, func(t *testing.T) fleet.Store { return &store{client: c, key: "retry:limiter:" + uniqueName(t)} })
}

// The key expires a minute after the end of its schedule, and holds only
// the schedule's end and the counter.
func TestStoreKeyExpires(t *testing.T) {
	t.Parallel()
	c := newClient(t, redisURL(t))
	s := &store{client: c, key: "retry:limiter:" + uniqueName(t)}
	_, _, err := s.Book(t.Context(), fleet.Schedule{Interval: time.Second}, 10, 0)
	require.NoError(t, err)
	ttl, err := c.PTTL(t.Context(), s.key).Result()
	require.NoError(t, err)
	assert.InDelta(t, (10*time.Second + time.Minute).Seconds(), ttl.Seconds(), 1, "the schedule's end and a minute")
	fields, err := c.HKeys(t.Context(), s.key).Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"tat", "seq"}, fields)
}

// An expired key is a schedule with nothing booked, and its marks do not
// repeat the old ones.
func TestStoreAfterExpiry(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	s := &store{client: c, key: "retry:limiter:x"}
	sc := fleet.Schedule{Interval: time.Second}
	_, m1, err := s.Book(t.Context(), sc, 5, 0)
	require.NoError(t, err)
	m.FastForward(5*time.Second + time.Minute + time.Millisecond)
	require.False(t, m.Exists(s.key), "expired")
	m.SetTime(time.Now().Add(time.Hour)) // miniredis's TIME moves with the key's clock only when told
	wait, m2, err := s.Book(t.Context(), sc, 1, 0)
	require.NoError(t, err)
	assert.Zero(t, wait, "nothing booked")
	assert.NotEqual(t, m1+1, m2, "a new counter")
	ok, err := s.Refund(t.Context(), sc, m1, 5)
	require.NoError(t, err)
	assert.False(t, ok, "the old booking's refund is refused")
}
