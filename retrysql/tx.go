package retrysql

import (
	"context"
	"database/sql"
	"errors"
	"reflect"

	"github.com/seed93a044d1/retry"
)

// Beginner is what [Tx] begins its transactions on: a *sql.DB, or a
// *sql.Conn. Use a *sql.DB: each attempt then takes a connection from the
// pool and gives it back before the wait, and a retry after a lost
// connection gets another one. On a *sql.Conn every attempt uses that one
// connection, so a retry after its loss fails at once.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// TxOption configures one call to [Tx]. Options apply in order; a nil
// TxOption does nothing, and a later option of a kind replaces an earlier
// one.
type TxOption func(*txConfig)

// WithPolicy makes Tx retry under p instead of the zero [retry.Policy]
// (the core's defaults: 4 attempts, 100ms doubling to 10s, full jitter). p
// is copied. Its AttemptTimeout bounds each whole transaction, BEGIN to
// COMMIT; its Budget, Limiter and Observe see one attempt per transaction.
func WithPolicy(p retry.Policy) TxOption {
	return func(c *txConfig) { c.policy = p }
}

// WithTxOptions begins every attempt's transaction with o: its isolation
// level and whether it is read-only. The zero sql.TxOptions, the default,
// means the driver's default isolation, read-write.
func WithTxOptions(o sql.TxOptions) TxOption {
	return func(c *txConfig) { c.txOptions = o }
}

// WithCommitCheck gives Tx a way to learn whether a transaction committed
// when its COMMIT failed in a way that leaves that open (the reply lost, the
// connection cut: see the package documentation). committed is asked only
// then, once per such COMMIT and not once the caller's context has ended, on
// the caller's goroutine and context, after the failed connection has been
// given back or discarded; it must read the database afresh, for example by
// looking for an idempotency key that fn wrote in the transaction. Its answer decides:
//
//   - true, nil: the transaction committed: Tx returns nil;
//   - false, nil: it did not: the COMMIT's error goes to the classifier
//     like any other (a lost connection is retried), as an attempt whose
//     outcome is known;
//   - an error: Tx stops at once with [retry.ErrNotIdempotent], the outcome
//     unknown, and both errors kept.
//
// Without a check (a nil committed, the default), such a COMMIT stops the
// call the same way. The check must tell a transaction that is still
// committing from one that never will; the package documentation shows one
// that does.
func WithCommitCheck(committed func(ctx context.Context) (bool, error)) TxOption {
	return func(c *txConfig) { c.committed = committed }
}

// txConfig is what the options of one call set.
type txConfig struct {
	policy    retry.Policy
	txOptions sql.TxOptions
	committed func(context.Context) (bool, error)
}

// Tx runs fn in a transaction on db and commits it, and when an attempt
// fails in a way worth another, rolls it back and runs the whole
// transaction again, from BEGIN, on a fresh transaction, under the policy
// of [WithPolicy]: never a statement alone. It returns nil once a COMMIT
// succeeded, or the [*retry.Error] of the retry loop ([retry.Do]), which
// keeps the last attempt's error and says why it stopped.
//
// Each attempt begins a transaction with the options of [WithTxOptions] on
// the attempt's context, calls fn with that context and transaction, and
// commits if fn returns nil. If fn returns an error or panics, the
// transaction is rolled back (a panic then propagates unchanged). The
// attempt returns only once the transaction has ended, so its connection is
// back in db's pool before any wait. fn must not call Commit or Rollback
// itself: to give up, return an error, wrapped in [retry.Permanent] to stop
// at once. fn may run several times, so it must not keep state from a
// failed attempt (assign the caller's variables, do not append to them).
//
// Errors are classified by the policy's Classifier ([retry.DefaultClassifier]
// when nil): a serialization failure (SQLSTATE 40001), a deadlock (40P01), a
// lost connection and driver.ErrBadConn are retried; integrity and data
// errors (classes 23, 22) and syntax errors (42) stop at once. A COMMIT whose
// outcome is unknown is never retried blindly: see [WithCommitCheck].
//
// Tx stops when ctx ends: a transaction still open then is rolled back and
// never committed, even if fn returns nil, and the error's Reason is
// context.Cause(ctx). A nil ctx counts as context.Background(). A nil db or
// fn gives an error, not a *retry.Error, and nothing is begun.
//
// Tx is safe for concurrent use, as db is; the options' values (the
// policy's Budget and Limiter, the check) must be too when calls share them.
func Tx(ctx context.Context, db Beginner, fn func(ctx context.Context, tx *sql.Tx) error, opts ...TxOption) error {
	if db == nil || isNilPointer(db) {
		return errNilDB
	}
	if fn == nil {
		return errNilFunc
	}
	if ctx == nil {
		ctx = context.Background()
	}
	t := &txn{ctx: ctx, db: db, fn: fn}
	for _, o := range opts {
		if o != nil {
			o(&t.txConfig)
		}
	}
	return retry.Do(ctx, t.attempt, t.policy, retry.Sequential) // a transaction is never in flight twice
}

var (
	errNilDB   = errors.New("retrysql: nil db")
	errNilFunc = errors.New("retrysql: nil fn")
)

// isNilPointer reports whether db is a nil pointer in a non-nil interface,
// such as a nil *sql.DB, whose BeginTx would panic.
func isNilPointer(db Beginner) bool {
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// txn is one call to Tx.
type txn struct {
	txConfig
	ctx context.Context // the caller's: the commit check runs on it
	db  Beginner
	fn  func(context.Context, *sql.Tx) error
}

// attempt is one transaction: BEGIN, fn, COMMIT, or a rollback on any
// failure. It returns only once the transaction has ended.
func (t *txn) attempt(ctx context.Context) error {
	tx, err := t.db.BeginTx(ctx, &t.txOptions)
	if err != nil {
		return err
	}
	ended := false
	defer func() {
		if !ended {
			// A failed rollback is not reported: the error that made it
			// is, and a server rolls back a transaction whose connection
			// is gone.
			_ = tx.Rollback()
		}
	}()
	if err := t.fn(ctx, tx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// A transaction whose context has ended is never committed: the
		// caller has given up on it, and database/sql would refuse anyway.
		// Saying so here, before COMMIT is sent, keeps its outcome known.
		return &notCommitted{context.Cause(ctx)}
	}
	ended = true
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return retry.Permanent(&commitError{err: errEndedByFn{err}, unknown: true})
		}
		return commitFailed(t.ctx, err, t.committed)
	}
	return nil
}
