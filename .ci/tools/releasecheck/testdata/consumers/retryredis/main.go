// Command retryredis uses retryredis as a user installs it: a limit shared
// through a Redis that cannot be reached fails closed, so no attempt starts
// and the error says why.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/retryredis"
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing will answer on
	if err != nil {
		fail("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	lim, err := retryredis.NewLimiter(client, "provider", 100, 10, nil)
	if err != nil {
		fail("NewLimiter: %v", err)
	}
	calls := 0
	err = retry.Do(context.Background(), func(context.Context) error { calls++; return nil },
		retry.Policy{Limiter: lim})
	if calls != 0 || !errors.Is(err, fleet.ErrUnavailable) {
		fail("Do: %v after %d calls; want fleet.ErrUnavailable before any", err, calls)
	}
	fmt.Println("retryredis: an unreachable store fails closed:", err)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
