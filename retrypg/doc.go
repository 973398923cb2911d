// Package retrypg brings the retry loop of github.com/seed93a044d1/retry to
// PostgreSQL through pgx v5 (github.com/jackc/pgx/v5). It is a module of its
// own, so that pgx never reaches the core's users.
//
// # Transactions
//
// [Tx] runs a function in a transaction and, when an attempt fails in a way
// worth another, rolls it back and runs the whole transaction again, from
// BEGIN, under a [retry.Policy]: it never retries a statement alone, never
// reuses a transaction after an error, never holds a pool connection through
// a wait, and never retries a COMMIT whose outcome is unknown without
// asking. pgx.BeginTxFunc runs a transaction once; Tx is its retrying
// counterpart, and the retrysql package (in the root module) is the same for
// database/sql, with the same names.
//
//	err := retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `UPDATE account SET balance = balance - $1 WHERE id = $2`, amount, from); err != nil {
//			return err
//		}
//		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance + $1 WHERE id = $2`, amount, to)
//		return err
//	}, retrypg.WithPolicy(policy), retrypg.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable}))
//
// It is a thin adapter over [retry.Do]: one attempt is one transaction, so
// the policy's attempts, backoff, budget, limiter, deadline checks and
// Observe hook apply to whole transactions, and the returned [*retry.Error]
// keeps the last attempt's error.
//
// Why the whole transaction: when PostgreSQL reports a serialization failure
// (SQLSTATE 40001) or a deadlock (40P01) it has aborted the transaction, and
// every later statement in it fails with 25P02 ("current transaction is
// aborted") until it is rolled back; a statement redone in a new transaction
// with values read in the old one writes stale data. The unit that can be
// retried is the transaction, every read included, so fn is the whole
// transaction, and it may run several times.
//
// What is retried is the policy's Classifier's to say ([retry.DefaultClassifier]
// when nil, which reads *pgconn.PgError's SQLSTATE and pgx's SafeToRetry):
// 40001 and 40P01, connection exceptions (class 08), too many connections
// (53300), a terminated backend or a server shutting down (57P01 to 57P03),
// and a lost connection are retried; integrity violations (class 23), data
// exceptions (22) and syntax or privilege errors (42) stop at once.
//
// # The commit
//
// COMMIT is the one statement whose failure can leave open whether it took
// effect: the server may have committed and lost the reply, or the
// connection may have been cut while COMMIT was in flight, and pgx then
// returns an error whose SafeToRetry() is false. Running the transaction
// again could apply it twice. A COMMIT error is read first for what it says
// about the outcome ([retry.OutcomeUnknown], plus a context that ended while
// COMMIT was under way, which pgx reports as a bare context.Canceled, and
// CockroachDB's ambiguous-result 40003), and then:
//
//	COMMIT returned                            Tx                                          OutcomeUnknown
//	nil                                        returns nil
//	a server error (40001, a deferred 23505)   the classifier decides (retry, stop)        false
//	pgx.ErrTxCommitRollback (fn ignored an     the classifier decides (retried: the        false
//	  error that aborted the transaction)        default has no rule for it)
//	outcome unknown, no commit check           stops: retry.ErrNotIdempotent               true
//	outcome unknown, check says committed      returns nil
//	outcome unknown, check says not            the classifier decides (usually retry)      false
//	outcome unknown, check fails               stops: retry.ErrNotIdempotent, both errors  true
//	pgx.ErrTxClosed (fn ended the transaction) stops: retry.ErrNotRetryable                true
//
// When the caller's context ends, the call stops with its cause instead, as
// every retry loop does. errors.Is(err, retry.ErrNotIdempotent) thus means:
// the transaction may have committed, and Tx did not run it again.
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
// this probe, rolled back so that it changes nothing, answers exactly:
//
//	check := func(ctx context.Context) (bool, error) {
//		probe, err := pool.Begin(ctx)
//		if err != nil {
//			return false, err
//		}
//		defer probe.Rollback(ctx)
//		tag, err := probe.Exec(ctx, `INSERT INTO done (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key)
//		return err == nil && tag.RowsAffected() == 0, err // the key was there: it committed
//	}
//	err := retrypg.Tx(ctx, pool, transfer, retrypg.WithPolicy(policy), retrypg.WithCommitCheck(check))
//
// (pg_xact_status on a transaction ID that fn read with pg_current_xact_id
// is another exact answer.) The check runs on the caller's context, so its
// deadline bounds a wait for an old transaction the server has not yet given
// up on (idle_in_transaction_session_timeout and TCP keepalives shorten
// that); a check that times out stops the call with the outcome unknown.
//
// # Connections, contexts, panics
//
// An attempt ends its transaction (COMMIT, or a rollback) before it returns;
// a pgxpool.Tx then gives its connection back to the pool (or destroys it, if
// it broke), so no connection is held through a wait. A transaction whose
// context ends is rolled back, not committed, even if fn then returns nil;
// the rollback runs on that ended context, so pgx closes the connection
// instead of waiting on it, and the server rolls the transaction back. A
// cancelled call stops with context.Cause(ctx), with OutcomeUnknown set if
// the context ended during COMMIT, or if fn returned the cancellation itself
// (the core counts an attempt cancelled in flight as unknown: fn may have
// done work outside the transaction), but not if fn returned nil and Tx
// declined to commit. The policy's AttemptTimeout bounds
// each whole transaction, COMMIT included. A panic in fn rolls the
// transaction back and propagates unchanged.
//
// OutcomeUnknown of an error before COMMIT follows the core's rules for that
// error (a connection lost during a statement counts as unknown), although
// the transaction itself was rolled back: fn may have done work outside it,
// a call to another service say, which Tx cannot see.
//
// # Savepoints
//
// Savepoints are fn's own: tx.Begin (a pgx pseudo-nested transaction) or
// SAVEPOINT, to roll back part of the work after an error fn expected (a
// unique violation it can live with) and go on, works as it would without
// Tx. Tx does not do CockroachDB's savepoint-restart protocol (SAVEPOINT
// cockroach_restart, ROLLBACK TO it on 40001, RELEASE it before COMMIT),
// which PostgreSQL does not have: on CockroachDB it retries from BEGIN,
// which CockroachDB also accepts.
//
// # Limits shared by a fleet
//
// [NewLimiter] shares one rate limit between the processes that use the
// same database, and [NewConcurrency] one concurrency limit, its slots
// leases in a table that run out a lease after a process dies: see the
// fleet package.
//
//	slots, err := retrypg.NewConcurrency(pool, "provider", 50, 10*time.Second, nil)
//	if err != nil {
//		return err
//	}
//	policy := retry.Policy{Concurrency: slots}
package retrypg
