// Package retryredis shares one rate limit between processes through Redis:
// [NewLimiter] returns a [retry.Limiter] that books every attempt of every
// process that uses the same name on the same Redis, so that a provider sees
// at most the rate, plus the burst, from all of them together:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	lim, err := retryredis.NewLimiter(rdb, "provider", 200, 20, nil)
//	if err != nil {
//		return err // a nil client, an empty name, a rate or burst that admits nothing
//	}
//	policy := retry.Policy{Limiter: lim}
//
// [NewConcurrency] shares one concurrency limit the same way: at most limit
// attempts in flight at once across the processes, each slot a lease in a
// sorted set that runs out a lease after a process dies:
//
//	slots, err := retryredis.NewConcurrency(rdb, "provider", 50, 10*time.Second, nil)
//	if err != nil {
//		return err
//	}
//	policy = retry.Policy{Limiter: lim, Concurrency: slots}
//
// The booking, the leases, the waits and what happens when Redis is slow or
// down are the fleet package's; this package is a few Lua scripts, one key
// per limit.
package retryredis
