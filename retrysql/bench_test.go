package retrysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrysql"
)

// The cost of Tx itself, on a first-try success: one transaction (BEGIN, one
// statement, COMMIT) on the in-memory bank driver, bare and through Tx. The
// difference is Tx's own work; the retrypg module's benchmarks set it against
// a transaction on loopback PostgreSQL.
func BenchmarkTx(b *testing.B) {
	ctx := context.Background()
	work := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "add", "alice", int64(1))
		return err
	}
	b.Run("database/sql", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := work(ctx, tx); err != nil {
				_ = tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrysql.Tx", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := retrysql.Tx(ctx, db, work); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrysql.Tx/options", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		p := retry.Policy{MaxAttempts: 5}
		check := func(context.Context) (bool, error) { return false, nil }
		for b.Loop() {
			err := retrysql.Tx(ctx, db, work, retrysql.WithPolicy(p),
				retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}), retrysql.WithCommitCheck(check))
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
