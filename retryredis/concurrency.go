package retryredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed93a044d1/retry/fleet"
)

// NewConcurrency returns a [retry.Concurrency] of limit attempts in flight
// at once, shared by every process that makes one with the same name on
// the same Redis (a *redis.Client, *redis.ClusterClient, *redis.Ring or
// redis.UniversalClient); each slot is a lease of lease, renewed while its
// attempt runs, so that the slots of a process that dies come back to the
// fleet a lease after its last renewal at most. opts may be nil: see
// [fleet.Options] for the defaults (each round trip 100ms at most; fail
// closed when Redis is slow or down) and [fleet.Concurrency] for how slots
// are leased, renewed and waited for.
//
// The limit is the key "retry:slots:" + name, a sorted set of lease ids
// scored by their expiries (microseconds on Redis's clock). Each lease is
// one script (EVALSHA, loaded with EVAL the first time a server does not
// have it) that reads Redis's own TIME, drops the expired leases and adds
// one if fewer than limit remain; a renewal is one script for all the
// process's leases, a release one ZREM. So the clocks of the processes
// never matter. The key expires a minute after its last lease would: an
// idle limit leaves nothing behind. Every process must use the same limit
// and lease for a name.
//
// Redis without persistence forgets every lease when it restarts: the
// attempts in flight then go on uncounted, beside those leased after.
//
// It fails, with an error that names the field, for a nil client, an empty
// name (callers who forgot it would share one limit), and for what
// [fleet.NewConcurrency] refuses: a limit below 1, a lease below 1ms, or
// bad options.
func NewConcurrency(client redis.Scripter, name string, limit int, lease time.Duration, opts *fleet.Options) (*fleet.Concurrency, error) {
	if err := checkClient("NewConcurrency", client); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("retryredis: NewConcurrency: the limit's name is empty: each limit needs a name of its own")
	}
	return fleet.NewConcurrency(&slots{client: client, key: "retry:slots:" + name}, limit, lease, opts)
}

// checkClient refuses a nil client, typed or not, for the constructor fn.
func checkClient(fn string, client redis.Scripter) error {
	nilClient := false
	switch c := client.(type) {
	case nil:
		nilClient = true
	case *redis.Client:
		nilClient = c == nil
	case *redis.ClusterClient:
		nilClient = c == nil
	case *redis.Ring:
		nilClient = c == nil
	}
	if nilClient {
		return fmt.Errorf("retryredis: %s: client is nil", fn)
	}
	return nil
}

// slots is the fleet.SlotStore of one sorted set.
type slots struct {
	client redis.Scripter
	key    string
}

// Expiries are microseconds as Lua numbers (doubles), exact for 285 years
// from 1970, written with %.17g: Redis turns a bare Lua number into text
// with 14 digits only. The key's own expiry follows the latest lease, and a
// minute more.
var leaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.17g', now))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], string.format('%.17g', now + tonumber(ARGV[3])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) / 1000) + 60000)
return 1
`)

// renewScript renews the leases ARGV[2:] that the set still holds (XX: it
// never adds one), and returns those it did not.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local expiry = string.format('%.17g', tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1]))
local lost = {}
for i = 2, #ARGV do
	if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
		redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
	else
		lost[#lost + 1] = ARGV[i]
	end
end
if #lost < #ARGV - 1 then redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) / 1000) + 60000) end
return lost
`)

var releaseScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)

func (s *slots) Lease(ctx context.Context, id string, limit int, lease time.Duration) (bool, error) {
	ok, err := leaseScript.Run(ctx, s.client, []string{s.key}, id, strconv.Itoa(limit), micros(lease)).Int()
	return ok == 1, err
}

func (s *slots) Renew(ctx context.Context, ids []string, lease time.Duration) ([]string, error) {
	args := make([]any, 0, 1+len(ids))
	args = append(args, micros(lease))
	for _, id := range ids {
		args = append(args, id)
	}
	lost, err := renewScript.Run(ctx, s.client, []string{s.key}, args...).StringSlice()
	if errors.Is(err, redis.Nil) {
		err = nil // an empty table is a nil reply
	}
	return lost, err
}

func (s *slots) Release(ctx context.Context, id string) error {
	return releaseScript.Run(ctx, s.client, []string{s.key}, id).Err()
}
