package retrypg_test

// retrysql (the root module's database/sql helper) on PostgreSQL, through
// pgx's database/sql driver: it lives here because the root module may not
// depend on pgx. The cut COMMIT is in cut_test.go.

import (
	"context"
	"database/sql"
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrysql"
)

// sqlTransfer is pgxTransfer for database/sql.
func sqlTransfer(s transferSpec) func(context.Context, *sql.Tx) error {
	hook := onFirstAttempt(s)
	return func(ctx context.Context, tx *sql.Tx) error {
		var a, b int64
		if err := tx.QueryRowContext(ctx, readBalances, s.from, s.to).Scan(&a, &b); err != nil {
			return err
		}
		hook(1)
		if _, err := tx.ExecContext(ctx, setBalance, s.from, a-s.amount); err != nil {
			return err
		}
		hook(2)
		if _, err := tx.ExecContext(ctx, setBalance, s.to, b+s.amount); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, recordTransfer, s.id, s.from, s.to, s.amount)
		return err
	}
}

// The workload through retrysql.Tx: every transfer commits exactly once, and
// money is neither made nor lost.
func TestSQLTransfers(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(transferSchema)
	db := d.sqlDB("")
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	res := runTransfers(t, func(ctx context.Context, s transferSpec, observe func(context.Context, retry.Event)) error {
		return retrysql.Tx(ctx, db, sqlTransfer(s), retrysql.WithPolicy(transferPolicy(observe)),
			retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}))
	})
	requireAllCommittedOnce(t, d, res, "retrysql.Tx")
}
