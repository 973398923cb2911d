package retrypg_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrypg"
)

var serializable = pgx.TxOptions{IsoLevel: pgx.Serializable}

// pgxTransfer is one transfer as fn for retrypg.Tx: read both balances,
// write both new ones, record it.
func pgxTransfer(s transferSpec) func(context.Context, pgx.Tx) error {
	hook := onFirstAttempt(s)
	return func(ctx context.Context, tx pgx.Tx) error {
		var a, b int64
		if err := tx.QueryRow(ctx, readBalances, s.from, s.to).Scan(&a, &b); err != nil {
			return err
		}
		hook(1)
		if _, err := tx.Exec(ctx, setBalance, s.from, a-s.amount); err != nil {
			return err
		}
		hook(2)
		if _, err := tx.Exec(ctx, setBalance, s.to, b+s.amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, recordTransfer, s.id, s.from, s.to, s.amount)
		return err
	}
}

// The workload through retrypg.Tx: every transfer commits exactly once, and
// money is neither made nor lost.
func TestTransfers(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(transferSchema)
	pool := d.pool("", workers)
	res := runTransfers(t, func(ctx context.Context, s transferSpec, observe func(context.Context, retry.Event)) error {
		return retrypg.Tx(ctx, pool, pgxTransfer(s),
			retrypg.WithPolicy(transferPolicy(observe)), retrypg.WithTxOptions(serializable))
	})
	requireAllCommittedOnce(t, d, res, "retrypg.Tx")
}

// conflict reports whether err is what a hand-written loop retries: a
// serialization failure or a deadlock.
func conflict(err error) bool {
	s := sqlState(err)
	return s == "40001" || s == "40P01"
}

// The same workload with the loop users write by hand: each statement run
// again, in the same transaction, when it fails with 40001 or 40P01. But
// PostgreSQL has aborted that transaction: the statement fails again with
// 25P02, and the transfer is lost, with an error.
func TestTransfersStatementRetrySameTransaction(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(transferSchema)
	pool := d.pool("", workers)
	res := runTransfers(t, func(ctx context.Context, s transferSpec, _ func(context.Context, retry.Event)) error {
		hook := onFirstAttempt(s)
		tx, err := pool.BeginTx(ctx, serializable)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		exec := func(sql string, args ...any) error {
			var err error
			for range 4 {
				if _, err = tx.Exec(ctx, sql, args...); !conflict(err) {
					return err
				}
			}
			return err
		}
		var a, b int64
		if err := tx.QueryRow(ctx, readBalances, s.from, s.to).Scan(&a, &b); err != nil {
			return err
		}
		hook(1)
		if err := exec(setBalance, s.from, a-s.amount); err != nil {
			return err
		}
		hook(2)
		if err := exec(setBalance, s.to, b+s.amount); err != nil {
			return err
		}
		if err := exec(recordTransfer, s.id, s.from, s.to, s.amount); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	require.NotEmpty(t, res.errs, "the provoked conflicts made transfers fail")
	aborted := 0
	for _, err := range res.errs {
		if sqlState(err) == "25P02" {
			aborted++
		}
	}
	assert.Positive(t, aborted, "a statement retried in an aborted transaction fails with 25P02")
	l := readLedger(t, d)
	assert.Equal(t, transfers-len(res.errs), l.recorded, "the failed transfers are lost")
	assert.Less(t, l.recorded, transfers)
	t.Logf("statement retry in the same transaction: %d of %d transfers failed (%d with 25P02, in_failed_sql_transaction) in %v",
		len(res.errs), transfers, aborted, res.wall.Round(time.Millisecond))
}

// The same workload with a loop that, when a statement fails with 40001 or
// 40P01, rolls back, begins a new transaction and runs the failed statement
// again there, then goes on. The statements before it were rolled back, and
// the values it writes were read in the old transaction: updates are lost,
// and money is made.
func TestTransfersStatementRetryNewTransaction(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(transferSchema)
	pool := d.pool("", workers)
	res := runTransfers(t, func(ctx context.Context, s transferSpec, _ func(context.Context, retry.Event)) error {
		hook := onFirstAttempt(s)
		tx, err := pool.BeginTx(ctx, serializable)
		if err != nil {
			return err
		}
		defer func() { tx.Rollback(ctx) }()
		exec := func(sql string, args ...any) error {
			var err error
			for range 4 {
				if _, err = tx.Exec(ctx, sql, args...); !conflict(err) {
					return err
				}
				_ = tx.Rollback(ctx)
				if tx, err = pool.BeginTx(ctx, serializable); err != nil {
					return err
				}
			}
			return err
		}
		var a, b int64
		if err := tx.QueryRow(ctx, readBalances, s.from, s.to).Scan(&a, &b); err != nil {
			return err
		}
		hook(1)
		if err := exec(setBalance, s.from, a-s.amount); err != nil {
			return err
		}
		hook(2)
		if err := exec(setBalance, s.to, b+s.amount); err != nil {
			return err
		}
		if err := exec(recordTransfer, s.id, s.from, s.to, s.amount); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	l := readLedger(t, d)
	assert.False(t, l.consistent, "balances no longer agree with the recorded transfers: updates were lost")
	assert.NotEqual(t, int64(accounts*startBalance), l.total, "money was made or lost")
	t.Logf("statement retry in a new transaction: %d transfers recorded, %d failed, total balance %d instead of %d, in %v",
		l.recorded, len(res.errs), l.total, accounts*startBalance, res.wall.Round(time.Millisecond))
}

// A statement that breaks its connection (here the backend is terminated,
// 57P01) is retried on another connection of the pool, whole.
func TestTxConnectionLostBeforeCommit(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE item (id int PRIMARY KEY)`)
	pool := d.pool("", 2)
	var calls atomic.Int32
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO item VALUES (1)`); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			require.Error(t, err)
			assert.Equal(t, "57P01", sqlState(err))
			return err
		}
		return nil
	}, retrypg.WithPolicy(retry.Policy{Backoff: retry.Constant(time.Millisecond)}))
	require.NoError(t, err)
	assert.Equal(t, int32(2), calls.Load())
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM item`).Scan(&n))
	assert.Equal(t, 1, n)
}

// A unique violation stops at once, and nothing is committed.
func TestTxStopsOnUniqueViolation(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE item (id int PRIMARY KEY, note text); INSERT INTO item VALUES (1, 'old')`)
	pool := d.pool("", 2)
	var calls atomic.Int32
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		calls.Add(1)
		if _, err := tx.Exec(ctx, `UPDATE item SET note = 'new'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO item VALUES (1, 'dup')`)
		return err
	})
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, re.Reason, retry.ErrNotRetryable)
	assert.Equal(t, "23505", sqlState(err))
	assert.False(t, re.OutcomeUnknown)
	assert.Equal(t, int32(1), calls.Load())
	var note string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT note FROM item`).Scan(&note))
	assert.Equal(t, "old", note, "rolled back")
}

// A fn that uses a savepoint to live with an error it expects works, and so
// does its retry from BEGIN after a deadlock.
func TestTxSavepoint(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE item (id int PRIMARY KEY); INSERT INTO item VALUES (1), (2);
		CREATE TABLE tag (name text PRIMARY KEY); INSERT INTO tag VALUES ('x');
		CREATE TABLE log (n int NOT NULL)`)
	pool := d.pool("", 4)
	var calls atomic.Int32
	var held sync.WaitGroup
	held.Add(2)
	// Two transactions that deadlock, each also inserting a duplicate tag
	// under a savepoint and carrying on.
	txn := func(first, second int) func() error {
		waited := false
		return func() error {
			return retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
				calls.Add(1)
				sp, err := tx.Begin(ctx) // SAVEPOINT
				if err != nil {
					return err
				}
				// On a table of its own: a duplicate of a row the other
				// transaction has locked would wait for it, and it waits
				// for this one below.
				if _, err := sp.Exec(ctx, `INSERT INTO tag VALUES ('x')`); sqlState(err) != "23505" {
					return errors.Join(errors.New("want a unique violation"), err)
				}
				if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE item SET id = id WHERE id = $1`, first); err != nil {
					return err
				}
				if !waited {
					waited = true
					held.Done()
					held.Wait()
				}
				if _, err := tx.Exec(ctx, `UPDATE item SET id = id WHERE id = $1`, second); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `INSERT INTO log VALUES ($1)`, first)
				return err
			}, retrypg.WithPolicy(retry.Policy{MaxAttempts: 10, Backoff: retry.Constant(time.Millisecond)}))
		}
	}
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { errA = txn(1, 2)() })
	wg.Go(func() { errB = txn(2, 1)() })
	wg.Wait()
	require.NoError(t, errA)
	require.NoError(t, errB)
	assert.GreaterOrEqual(t, calls.Load(), int32(3), "the deadlock victim ran again")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM log`).Scan(&n))
	assert.Equal(t, 2, n, "each committed once")
}

// Each attempt gives its connection back before the retry loop waits.
func TestTxConnectionBackBeforeWait(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	pool := d.pool("", 2)
	var acquired []int32
	p := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Millisecond)}
	p.Observe = func(_ context.Context, e retry.Event) {
		if e.Retry {
			acquired = append(acquired, pool.Stat().AcquiredConns())
		}
	}
	var calls int
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		calls++
		if calls < 3 {
			// What PostgreSQL raises for a serialization failure, from fn.
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$`)
			return err
		}
		return nil
	}, retrypg.WithPolicy(p))
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 0}, acquired, "connections acquired at each wait")
}

// The transaction options reach the server, on every attempt.
func TestTxOptions(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	pool := d.pool("", 2)
	var seen [][2]string
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		var iso, ro string
		if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')`).Scan(&iso, &ro); err != nil {
			return err
		}
		seen = append(seen, [2]string{iso, ro})
		if len(seen) == 1 {
			return &pgconn.PgError{Code: "40001", Message: "try again"}
		}
		return nil
	}, retrypg.WithPolicy(retry.Policy{Backoff: retry.Constant(0)}),
		retrypg.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly}))
	require.NoError(t, err)
	assert.Equal(t, [][2]string{{"serializable", "on"}, {"serializable", "on"}}, seen)
}

// A context cancelled during a statement: the transaction is rolled back,
// the call stops at once with the cause, and nothing is committed.
func TestTxCancelledMidTransaction(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE item (id int PRIMARY KEY)`)
	pool := d.pool("", 2)
	ctx, cancel := context.WithCancelCause(t.Context())
	errShutdown := errors.New("shutting down")
	start := time.Now()
	err := retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO item VALUES (1)`); err != nil {
			return err
		}
		time.AfterFunc(50*time.Millisecond, func() { cancel(errShutdown) })
		_, err := tx.Exec(ctx, `SELECT pg_sleep(30)`)
		return err
	}, retrypg.WithPolicy(retry.Policy{Backoff: retry.Constant(0)}))
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, re.Reason, errShutdown)
	assert.Equal(t, 1, re.Attempts)
	assert.Less(t, time.Since(start), 20*time.Second, "it did not wait for pg_sleep")
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM item`).Scan(&n))
	assert.Zero(t, n)
}

// A *pgx.Conn serves too.
func TestTxOnConn(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE item (id int PRIMARY KEY)`)
	conn, err := pgx.ConnectConfig(t.Context(), d.config(""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	calls := 0
	err = retrypg.Tx(t.Context(), conn, func(ctx context.Context, tx pgx.Tx) error {
		calls++
		if _, err := tx.Exec(ctx, `INSERT INTO item VALUES (1)`); err != nil {
			return err
		}
		if calls == 1 {
			return &pgconn.PgError{Code: "40P01", Message: "deadlock"}
		}
		return nil
	}, retrypg.WithPolicy(retry.Policy{Backoff: retry.Constant(0)}))
	require.NoError(t, err)
	assert.Equal(t, 2, calls)
}

// fn must not end the transaction itself.
func TestTxFnEndsTransaction(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	pool := d.pool("", 2)
	calls := 0
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		calls++
		return tx.Commit(ctx)
	})
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, re.Reason, retry.ErrNotRetryable)
	assert.ErrorIs(t, err, pgx.ErrTxClosed)
	assert.True(t, re.OutcomeUnknown)
	assert.Equal(t, 1, calls)
}

// Bad input gives an error, and no panic (the nil fn case needs a server).
func TestTxBadInput(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, pgx.Tx) error { return nil }
	assert.EqualError(t, retrypg.Tx(t.Context(), nil, fn), "retrypg: nil db")
	assert.EqualError(t, retrypg.Tx(t.Context(), (*pgxpool.Pool)(nil), fn), "retrypg: nil db")
	assert.EqualError(t, retrypg.Tx(t.Context(), (*pgx.Conn)(nil), fn), "retrypg: nil db")
	d := newDatabase(t)
	assert.EqualError(t, retrypg.Tx(t.Context(), d.pool("", 1), nil), "retrypg: nil fn")
}

// A transaction is never in flight twice: under a policy that hedges, one
// Tx call whose transaction is slower than the hedge delay commits one row
// on a real PostgreSQL.
func TestTxNeverHedged(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(`CREATE TABLE hedged (n int)`)
	pool := d.pool("", 4)
	runs := 0 // no lock: the transaction never runs twice at once
	err := retrypg.Tx(t.Context(), pool, func(ctx context.Context, tx pgx.Tx) error {
		runs++
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO hedged VALUES (1)`)
		return err
	}, retrypg.WithPolicy(retry.Policy{HedgeDelay: retry.Constant(time.Millisecond), MaxInFlight: 3}))
	require.NoError(t, err)
	assert.Equal(t, 1, runs)
	var rows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM hedged`).Scan(&rows))
	assert.Equal(t, 1, rows, "committed transactions")
}
