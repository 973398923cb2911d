// Command retrypg uses retrypg as a user installs it: a transaction on a pool
// whose server refuses connections fails as a *retry.Error that keeps the
// cause, after the attempts the policy allows.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrypg"
)

func main() {
	// A loopback port that nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://user@"+addr+"/db?sslmode=disable&connect_timeout=5")
	if err != nil {
		fail("pgxpool.New: %v", err)
	}
	defer pool.Close()
	runs := 0
	err = retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error { runs++; return nil },
		retrypg.WithPolicy(retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(time.Millisecond)}))
	var re *retry.Error
	if !errors.As(err, &re) || re.Attempts != 2 || !errors.Is(err, syscall.ECONNREFUSED) || runs != 0 {
		fail("Tx: %v (attempts %v, fn ran %d times); want a *retry.Error after 2 attempts, refused, fn never run", err, re, runs)
	}
	fmt.Println("retrypg: a refused connection is retried, and fails with its cause:", re.Reason)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
