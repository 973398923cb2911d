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
// The booking, the batching and what happens when Redis is slow or down
// are the fleet package's; this package is one Lua script on one key.
package retryredis
