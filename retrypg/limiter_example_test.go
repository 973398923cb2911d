package retrypg_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrypg"
)

// Every process that makes a limiter of the same name on the same database
// shares its rate: 200 attempts a second with a burst of 20 for the whole
// fleet, retries included. (No output: it needs a database.)
func ExampleNewLimiter() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	policy := retry.Policy{Limiter: retrypg.NewLimiter(pool, "provider", 200, 20, nil)}
	err = retry.Do(context.Background(), func(ctx context.Context) error {
		return nil // the call to the provider
	}, policy)
	if err != nil {
		log.Print(err)
	}
}
