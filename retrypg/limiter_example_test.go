package retrypg_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/retrypg"
)

// Every process that makes a limiter of the same name on the same database
// shares its rate: here 200 attempts a second with a burst of 20 for the
// whole fleet, retries included. The database here cannot be reached, so the
// limiter fails closed, as it does by default: no attempt starts, and the
// error says why.
func ExampleNewLimiter() {
	l, _ := net.Listen("tcp", "127.0.0.1:0") // a port that nothing will answer on
	addr := l.Addr().String()
	l.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://app@"+addr+"/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	lim, err := retrypg.NewLimiter(pool, "email-provider", 200, 20, nil)
	if err != nil {
		log.Fatal(err)
	}
	policy := retry.Policy{Limiter: lim}
	calls := 0
	err = retry.Do(context.Background(), func(ctx context.Context) error {
		calls++ // the call to the provider
		return nil
	}, policy)
	var re *retry.Error
	fmt.Println("attempts:", calls)
	fmt.Println("stopped before the first attempt:", errors.As(err, &re) && re.Attempts == 0)
	fmt.Println("the limiter's store is unavailable:", errors.Is(err, fleet.ErrUnavailable))
	// Output:
	// attempts: 0
	// stopped before the first attempt: true
	// the limiter's store is unavailable: true
}
