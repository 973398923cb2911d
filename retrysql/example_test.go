package retrysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrysql"
)

// The examples run on bank, a small in-memory database/sql driver in this
// package's tests (bank_test.go), so that they need no server: its
// statements are "add", "balance", "key" and "haskey" where PostgreSQL would
// take SQL, and it fails the statements an example chooses the way a real
// server does. Everything else is database/sql and retrysql as you would
// use them.

// A transfer whose first COMMIT fails with a serialization failure (SQLSTATE
// 40001) runs again, whole, and commits once.
func Example() {
	b := newBank(map[string]int64{"alice": 100})
	b.inject(fault{stmt: "commit", err: sqlError("40001")})
	db := sql.OpenDB(b)
	defer db.Close()

	attempts := 0
	err := retrysql.Tx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		attempts++
		var balance int64
		if err := tx.QueryRowContext(ctx, "balance", "alice").Scan(&balance); err != nil {
			return err
		}
		if balance < 30 {
			return retry.Permanent(errors.New("insufficient funds"))
		}
		if _, err := tx.ExecContext(ctx, "add", "alice", int64(-30)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "add", "bob", int64(30))
		return err
	}, retrysql.WithPolicy(retry.Policy{Backoff: retry.Constant(1)}),
		retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}))

	fmt.Println("error:", err)
	fmt.Println("attempts:", attempts)
	fmt.Println("alice:", b.get("alice"), "bob:", b.get("bob"))
	// Output:
	// error: <nil>
	// attempts: 2
	// alice: 70 bob: 30
}

// When the connection breaks after COMMIT was sent, the transaction may have
// committed. Without a commit check, Tx does not run it again: it stops, and
// says so.
func ExampleTx_outcomeUnknown() {
	b := newBank(map[string]int64{"alice": 100})
	b.inject(fault{stmt: "commit", err: lostReply{}, applied: true}) // committed, and the reply lost
	db := sql.OpenDB(b)
	defer db.Close()

	err := retrysql.Tx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "add", "alice", int64(-30))
		return err
	})

	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println("not idempotent:", errors.Is(err, retry.ErrNotIdempotent))
		fmt.Println("outcome unknown:", re.OutcomeUnknown)
		fmt.Println(err)
	}
	fmt.Println("alice:", b.get("alice"))
	// Output:
	// not idempotent: true
	// outcome unknown: true
	// retry: gave up after 1 attempt (not declared idempotent): retrysql: commit outcome unknown: bank: connection closed before the reply
	// alice: 70
}

// With a commit check, Tx asks whether a transaction whose COMMIT lost its
// reply committed: here fn records an idempotency key in the transaction,
// and the check looks for it on a fresh connection. The first COMMIT never
// reached the server, so the check finds nothing and the transfer runs
// again; the second COMMIT committed but lost its reply, so the check finds
// the key and Tx returns nil. The account is debited once.
func ExampleWithCommitCheck() {
	b := newBank(map[string]int64{"alice": 100})
	b.inject(
		fault{stmt: "commit", err: lostReply{}},                // cut before the server got it
		fault{stmt: "commit", err: lostReply{}, applied: true}, // committed, and the reply lost
	)
	db := sql.OpenDB(b)
	defer db.Close()

	const key = "transfer-7f3a" // unique to this transfer, chosen by the caller
	committed := func(ctx context.Context) (bool, error) {
		var found bool
		err := db.QueryRowContext(ctx, "haskey", key).Scan(&found)
		fmt.Println("checked: committed =", found)
		return found, err
	}
	err := retrysql.Tx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "key", key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "add", "alice", int64(-30))
		return err
	}, retrysql.WithPolicy(retry.Policy{Backoff: retry.Constant(1)}), retrysql.WithCommitCheck(committed))

	fmt.Println("error:", err)
	fmt.Println("alice:", b.get("alice"))
	// Output:
	// checked: committed = false
	// checked: committed = true
	// error: <nil>
	// alice: 70
}
