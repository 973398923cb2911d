package retryredis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/fleet"
)

// NewLimiter returns a [retry.Limiter] of r attempts per second with bursts
// of burst, shared by every process that makes one with the same name on the
// same Redis: a *redis.Client, *redis.ClusterClient, *redis.Ring or
// redis.UniversalClient. opts may be nil: see [fleet.Options] for the
// defaults (each round trip 100ms at most; fail closed when Redis is slow
// or down) and [fleet.Limiter] for how slots are booked and handed out.
//
// The limit is the key "retry:limiter:" + name, a hash that holds the end of
// its schedule (on Redis's clock, in microseconds) and a booking counter.
// Each booking is one script (EVALSHA, loaded with EVAL the first time a
// server does not have it) that reads Redis's own TIME, so the clocks of the
// processes never matter. The key expires a minute after the end of its
// schedule: an idle limit leaves nothing behind, and a key that expired is
// a schedule with nothing booked. Every process must use the same rate and
// burst for a name.
//
// Redis without persistence forgets every schedule when it restarts:
// attempts booked ahead before then overlap for a moment with those booked
// after (see the fleet package).
//
// It fails, with an error that names the field, for a nil client, an empty
// name (callers who forgot it would share one limit), and for what
// [fleet.New] refuses: a rate or burst that admits nothing, or bad options.
func NewLimiter(client redis.Scripter, name string, r rate.Limit, burst int, opts *fleet.Options) (*fleet.Limiter, error) {
	if err := checkClient("NewLimiter", client); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("retryredis: NewLimiter: the limit's name is empty: each limit needs a name of its own")
	}
	return fleet.New(&store{client: client, key: "retry:limiter:" + name}, r, burst, opts)
}

// store is the fleet.Store of one key.
type store struct {
	client redis.Scripter
	key    string
}

// The schedule's times are microseconds as Lua numbers (doubles): exact to
// a quarter of a microsecond today. The booking counter starts at the time
// a key is made, in microseconds, so that a key that expired and came back
// never repeats a mark. The end of the schedule is at most 2^62ns (about
// 146 years) ahead of now, which only a rate of a few slots a century
// reaches: slots past it share that place, and the times stay exact.
var bookScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local span = tonumber(ARGV[1])
local base = now + tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'tat', 'seq')
local tat, seq = tonumber(st[1]), tonumber(st[2])
if tat and tat > base then base = tat end
if base > now + 4611686018427387.904 - span then base = now + 4611686018427387.904 - span end
if seq then seq = seq + 1 else seq = now end
local tat2 = base + span
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', tat2), 'seq', string.format('%.17g', seq))
redis.call('PEXPIRE', KEYS[1], math.ceil((tat2 - now) / 1000) + 60000)
return {string.format('%.17g', base - now), string.format('%.17g', seq), t[1], t[2]}
`)

var refundScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'tat', 'seq')
if not st[2] or tonumber(st[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', tonumber(st[1]) - tonumber(ARGV[2])))
return 1
`)

// span returns n intervals, at most the largest Duration.
func span(n int, interval time.Duration) time.Duration {
	if n <= 0 || interval <= 0 {
		return 0
	}
	if interval > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * interval
}

func micros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/1e3, 'f', -1, 64)
}

func (s *store) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	wait, mark, _, err := s.BookClocked(ctx, sc, n, after)
	return wait, mark, err
}

// BookClocked makes the store a fleet.ClockedStore: now is Redis's TIME at
// the booking, in nanoseconds since 1970 (to the microsecond).
func (s *store) BookClocked(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	res, err := bookScript.Run(ctx, s.client, []string{s.key}, micros(span(n, sc.Interval)), micros(after)).StringSlice()
	if err != nil {
		return 0, 0, 0, err
	}
	if len(res) != 4 {
		return 0, 0, 0, fmt.Errorf("retryredis: booking script answered %q", res)
	}
	wait, err1 := strconv.ParseFloat(res[0], 64)
	mark, err2 := strconv.ParseFloat(res[1], 64)
	sec, err3 := strconv.ParseInt(res[2], 10, 64)
	usec, err4 := strconv.ParseInt(res[3], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || wait < 0 || math.IsNaN(wait) {
		return 0, 0, 0, fmt.Errorf("retryredis: booking script answered %q: %w", res, err)
	}
	now := sec*1e9 + usec*1e3
	// Clamped before converting: a float64 above the int64 range converts
	// to a negative Duration.
	return time.Duration(math.Min(math.Round(wait*1e3), math.MaxInt64/2)), int64(mark), now, nil
}

// clockScript reads TIME as the booking script does, in a script of its
// own, so that a clock probe takes the same way through Redis as a booking.
var clockScript = redis.NewScript(`return redis.call('TIME')`)

// Now makes the store a fleet.ClockedStore: Redis's TIME, in nanoseconds
// since 1970 (to the microsecond), without booking.
func (s *store) Now(ctx context.Context) (int64, error) {
	res, err := clockScript.Run(ctx, s.client, []string{s.key}).StringSlice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("retryredis: clock script answered %q", res)
	}
	sec, err1 := strconv.ParseInt(res[0], 10, 64)
	usec, err2 := strconv.ParseInt(res[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("retryredis: clock script answered %q: %w", res, err)
	}
	return sec*1e9 + usec*1e3, nil
}

func (s *store) Refund(ctx context.Context, sc fleet.Schedule, mark int64, n int) (bool, error) {
	ok, err := refundScript.Run(ctx, s.client, []string{s.key}, strconv.FormatInt(mark, 10), micros(span(n, sc.Interval))).Int()
	return ok == 1, err
}
