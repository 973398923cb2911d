package retrypg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrypg"
)

// The examples talk to scriptedServer (server_test.go), a loopback stand-in
// for PostgreSQL that answers each statement as the example's script says
// and logs what it received, so that they run without a server. pgx and
// retrypg run against it exactly as against PostgreSQL.

// A transfer whose COMMIT fails with a serialization failure (SQLSTATE 40001)
// runs again, whole, from BEGIN, and commits once.
func Example() {
	commits := 0
	server, url := newScriptedServer(func(stmt string) answer {
		if stmt == "commit" {
			if commits++; commits == 1 {
				return answer{code: "40001"} // could not serialize access
			}
		}
		return answer{tag: strings.ToUpper(strings.Fields(stmt)[0])}
	})
	defer server.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	err = retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE account SET balance = balance - 30 WHERE id = 1`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance + 30 WHERE id = 2`)
		return err
	}, retrypg.WithPolicy(retry.Policy{Backoff: retry.Constant(1)}),
		retrypg.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable}))

	fmt.Println("error:", err)
	fmt.Println(server.statements())
	// Output:
	// error: <nil>
	// begin isolation level serializable -> BEGIN
	// UPDATE account SET balance = balance - 30 WHERE id = 1 -> UPDATE
	// UPDATE account SET balance = balance + 30 WHERE id = 2 -> UPDATE
	// commit -> SQLSTATE 40001
	// begin isolation level serializable -> BEGIN
	// UPDATE account SET balance = balance - 30 WHERE id = 1 -> UPDATE
	// UPDATE account SET balance = balance + 30 WHERE id = 2 -> UPDATE
	// commit -> COMMIT
}

// When the connection closes after COMMIT was sent, the transaction may
// have committed. Without a commit check, Tx does not run it again: it
// stops, and says so.
func ExampleTx_outcomeUnknown() {
	server, url := newScriptedServer(func(stmt string) answer {
		if stmt == "commit" {
			return answer{hangUp: true} // committed, or not: the client cannot know
		}
		return answer{tag: strings.ToUpper(strings.Fields(stmt)[0])}
	})
	defer server.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	err = retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance - 30 WHERE id = 1`)
		return err
	})

	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println("attempts:", re.Attempts)
		fmt.Println("not idempotent:", errors.Is(err, retry.ErrNotIdempotent))
		fmt.Println("outcome unknown:", re.OutcomeUnknown)
	}
	fmt.Println(server.statements())
	// Output:
	// attempts: 1
	// not idempotent: true
	// outcome unknown: true
	// begin -> BEGIN
	// UPDATE account SET balance = balance - 30 WHERE id = 1 -> UPDATE
	// commit -> (connection closed)
}

// With a commit check, Tx asks whether a transaction whose COMMIT lost its
// reply committed. Here fn records an idempotency key in the transaction,
// and the check probes for it on a fresh connection with an INSERT that
// waits for any transaction still holding the key (see the package
// documentation) and is rolled back: "INSERT 0 0" means the key was there,
// so the transfer committed and is not run again.
func ExampleWithCommitCheck() {
	server, url := newScriptedServer(func(stmt string) answer {
		switch {
		case stmt == "commit":
			return answer{hangUp: true} // here it did commit; the reply is lost
		case strings.HasPrefix(stmt, "INSERT INTO done") && strings.Contains(stmt, "ON CONFLICT"):
			return answer{tag: "INSERT 0 0"} // the probe: the key is there
		}
		return answer{tag: strings.ToUpper(strings.Fields(stmt)[0])}
	})
	defer server.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	committed := func(ctx context.Context) (bool, error) {
		probe, err := pool.Begin(ctx)
		if err != nil {
			return false, err
		}
		defer probe.Rollback(ctx)
		tag, err := probe.Exec(ctx, `INSERT INTO done (key) VALUES ('transfer-7f3a') ON CONFLICT (key) DO NOTHING`)
		return err == nil && tag.RowsAffected() == 0, err
	}
	err = retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO done (key) VALUES ('transfer-7f3a')`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance - 30 WHERE id = 1`)
		return err
	}, retrypg.WithCommitCheck(committed))

	fmt.Println("error:", err)
	fmt.Println(server.statements())
	// Output:
	// error: <nil>
	// begin -> BEGIN
	// INSERT INTO done (key) VALUES ('transfer-7f3a') -> INSERT
	// UPDATE account SET balance = balance - 30 WHERE id = 1 -> UPDATE
	// commit -> (connection closed)
	// begin -> BEGIN
	// INSERT INTO done (key) VALUES ('transfer-7f3a') ON CONFLICT (key) DO NOTHING -> INSERT 0 0
	// rollback -> ROLLBACK
}
