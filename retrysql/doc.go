// Package retrysql retries database/sql transactions whole: [Tx] runs a
// function in a transaction and, when an attempt fails in a way worth
// another, rolls it back and runs the whole transaction again, from BEGIN,
// under a [retry.Policy]. It never retries a statement alone, never reuses
// a transaction after an error, never holds a connection through a wait, and
// never retries a COMMIT whose outcome is unknown without asking.
//
//	err := retrysql.Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, `UPDATE account SET balance = balance - $1 WHERE id = $2`, amount, from); err != nil {
//			return err
//		}
//		_, err := tx.ExecContext(ctx, `UPDATE account SET balance = balance + $1 WHERE id = $2`, amount, to)
//		return err
//	}, retrysql.WithPolicy(policy), retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}))
//
// It is a thin adapter over [retry.Do]: one attempt is one transaction, so
// the policy's attempts, backoff, budget, limiter, deadline checks and
// Observe hook apply to whole transactions, and the returned [*retry.Error]
// keeps the last attempt's error. The package needs only the standard
// library; the retrypg module (github.com/seed93a044d1/retry/retrypg) does
// the same for pgx, and its tests run this package against PostgreSQL.
//
// # Why the whole transaction
//
// When PostgreSQL reports a serialization failure (SQLSTATE 40001) or a
// deadlock (40P01), it has aborted the transaction: every later statement in
// it fails with 25P02 ("current transaction is aborted") until it is rolled
// back. Retrying the failed statement achieves nothing, and redoing it in a
// new transaction with values read in the old one writes stale data. The
// unit that can be retried is the transaction, from BEGIN, with every read
// done again; so fn is the whole transaction, and it may run several times.
//
// # What is retried
//
// Errors from BEGIN, from fn and from COMMIT go to the policy's Classifier
// ([retry.DefaultClassifier] when nil), which reads SQLSTATE codes from any
// error with a SQLState() string method (pgx's, lib/pq's): 40001 and 40P01
// are retried, and so are connection exceptions (class 08), too many
// connections (53300), server shutdowns (57P01 to 57P03), driver.ErrBadConn
// and a lost connection; integrity violations (class 23: a unique key, a
// foreign key), data exceptions (22) and syntax or privilege errors (42)
// stop at once, with [retry.ErrNotRetryable]. [retry.Permanent] and
// [retry.Transient] in fn's error decide for themselves.
//
// # The commit
//
// COMMIT is the one statement whose failure can leave open whether it took
// effect: the server may have committed and lost the reply, or the
// connection may have been cut while COMMIT was in flight. Running the
// transaction again could then apply it twice (charge a card twice). So a
// COMMIT error is read first for what it says about the outcome
// ([retry.OutcomeUnknown], plus a context that ended while COMMIT was under
// way and CockroachDB's ambiguous-result 40003), and then:
//
//	COMMIT returned                          Tx                                          OutcomeUnknown
//	nil                                      returns nil
//	a server error (40001, a deferred 23505) the classifier decides (retry, stop)        false
//	driver.ErrBadConn (nothing was sent)     retried                                     false
//	outcome unknown, no commit check         stops: retry.ErrNotIdempotent               true
//	outcome unknown, check says committed    returns nil
//	outcome unknown, check says not          the classifier decides (usually retry)      false
//	outcome unknown, check fails             stops: retry.ErrNotIdempotent, both errors  true
//	sql.ErrTxDone (fn ended the transaction) stops: retry.ErrNotRetryable                true
//
// When the caller's context ends, the call stops with its cause instead, as
// every retry loop does. errors.Is(err, retry.ErrNotIdempotent) thus means:
// the transaction may have committed, and Tx did not run it again. Whether a lost COMMIT is
// reported as such depends on the driver: database/sql reserves
// driver.ErrBadConn for a statement that was never sent, and pgx's stdlib
// driver (github.com/jackc/pgx/v5/stdlib) reports a lost reply with
// SafeToRetry() false, which the core reads as unknown.
//
// # A commit check
//
// [WithCommitCheck] tells Tx how to find out. The usual way is an
// idempotency key: fn inserts a key unique to this piece of work into a
// table with a unique index, in the same transaction, and the check looks
// for it. The check runs on a fresh connection while the server may still be
// finishing the lost COMMIT, or may not yet have noticed that the old
// connection is gone and the COMMIT will never come. A SELECT of the key
// would then not see it and answer "not committed" too early. An INSERT of
// the same key waits instead for the transaction that holds it to end, so
// in PostgreSQL this probe, rolled back so that it changes nothing, answers
// exactly:
//
//	check := func(ctx context.Context) (bool, error) {
//		probe, err := db.BeginTx(ctx, nil)
//		if err != nil {
//			return false, err
//		}
//		defer probe.Rollback()
//		res, err := probe.ExecContext(ctx, `INSERT INTO done (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key)
//		if err != nil {
//			return false, err
//		}
//		n, err := res.RowsAffected()
//		return n == 0, err // the key was there: the transfer committed
//	}
//	err := retrysql.Tx(ctx, db, transfer, retrysql.WithPolicy(policy), retrysql.WithCommitCheck(check))
//
// (PostgreSQL's pg_xact_status on a transaction ID that fn read with
// pg_current_xact_id is another exact answer.) The check runs on the
// caller's context, so its deadline bounds a wait for an old transaction
// that the server has not yet given up on; a check that times out stops the
// call with the outcome unknown.
//
// # Connections, contexts, panics
//
// An attempt ends its transaction (COMMIT, or a rollback) before it returns,
// so its connection is back in the pool before the retry loop waits. A
// transaction whose context ends is rolled back, not committed, even if fn
// then returns nil; a cancelled call stops with context.Cause(ctx), and with
// OutcomeUnknown set if the context ended during COMMIT, or if fn returned
// the cancellation itself (the core counts an attempt cancelled in flight as
// unknown: fn may have done work outside the transaction), but not if fn
// returned nil and Tx declined to commit. The policy's
// AttemptTimeout bounds each whole transaction, COMMIT included. A panic in
// fn rolls the transaction back and propagates unchanged.
//
// OutcomeUnknown of an error before COMMIT follows the core's rules for
// that error (a connection lost during a statement counts as unknown),
// although the transaction itself was rolled back: fn may have done work
// outside it, a call to another service say, which Tx cannot see.
//
// # Savepoints
//
// Savepoints are fn's own: a fn that sets a SAVEPOINT, rolls back to it
// after an error it expected (a unique violation it can live with) and goes
// on works as it would without Tx. Tx does not do CockroachDB's
// savepoint-restart protocol (SAVEPOINT cockroach_restart, ROLLBACK TO it on
// 40001, RELEASE it before COMMIT), which PostgreSQL does not have: on
// CockroachDB it retries from BEGIN, which CockroachDB also accepts.
package retrysql
