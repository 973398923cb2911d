package retrysql

import (
	"context"
	"errors"

	"github.com/seed93a044d1/retry"
)

// The rules for a failed COMMIT are the same in retrysql and retrypg, and
// so is this file but for its package name and error prefix: keep them so
// (see retrypg/commit.go, in the retrypg module). The two
// modules are versioned apart, so they share no code: a nested module that
// imported the root's internals would break when a newer root changed them.

// commitFailed turns the error of a COMMIT into the attempt's error. A
// COMMIT whose outcome is unknown must not be retried blindly: without a
// check, or when the check fails, the error refuses a retry with
// retry.ErrNotIdempotent; a check that finds the transaction committed turns
// the attempt into a success, and one that finds it not committed leaves the
// error to the classifier, its outcome known. ctx is the caller's.
func commitFailed(ctx context.Context, err error, committed func(context.Context) (bool, error)) error {
	if !commitOutcomeUnknown(err) {
		return &commitError{err: err}
	}
	if committed == nil || ctx.Err() != nil {
		return &commitError{err: err, unknown: true}
	}
	ok, checkErr := committed(ctx)
	switch {
	case checkErr != nil:
		return &commitError{err: err, check: checkErr, unknown: true}
	case ok:
		return nil
	}
	return &commitError{err: err, checked: true}
}

// commitOutcomeUnknown reports whether a failed COMMIT may have committed:
// what retry.OutcomeUnknown says of its error (a lost connection, a timeout,
// pgx's SafeToRetry() false, SQLSTATE class 08), and also a cancelled
// context, since Tx checks the context before sending COMMIT, so a context
// error from COMMIT means it was cut while under way (pgx reports a cancel
// then as a bare context.Canceled, which the core counts as known), and
// SQLSTATE 40003, statement_completion_unknown, which CockroachDB returns
// for a commit whose result is ambiguous.
func commitOutcomeUnknown(err error) bool {
	if retry.OutcomeUnknown(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var coded interface{ SQLState() string }
	return errors.As(err, &coded) && coded.SQLState() == "40003"
}

// commitError is the error of an attempt whose COMMIT failed. It says
// whether the transaction may have committed (OutcomeUnknown), and refuses
// a retry when it may (Unrepeatable).
type commitError struct {
	err     error // what COMMIT returned
	check   error // what the commit check returned, if it failed
	unknown bool  // the transaction may have committed
	checked bool  // the commit check found that it did not
}

func (e *commitError) Error() string {
	switch {
	case e.check != nil:
		return "retrysql: commit outcome unknown: " + e.err.Error() + "; commit check: " + e.check.Error()
	case e.unknown:
		return "retrysql: commit outcome unknown: " + e.err.Error()
	case e.checked:
		return "retrysql: commit failed, and the commit check found nothing committed: " + e.err.Error()
	}
	return "retrysql: commit: " + e.err.Error()
}

// Unwrap returns the COMMIT's error and the check's, those that are not nil.
func (e *commitError) Unwrap() []error {
	if e.check != nil {
		return []error{e.err, e.check}
	}
	return []error{e.err}
}

// OutcomeUnknown tells the retry loop whether the transaction may have
// committed, overriding what the COMMIT's error alone would say: a check
// that found nothing committed makes the outcome known.
func (e *commitError) OutcomeUnknown() bool { return e.unknown }

// Unrepeatable stops the call when the transaction may have committed:
// running it again could apply it twice.
func (e *commitError) Unrepeatable() error {
	if e.unknown {
		return retry.ErrNotIdempotent
	}
	return nil
}

// RetryDecision judges by the COMMIT's error alone when a commit check
// failed, so that the check's error (a typo in its query, say) cannot turn
// the reason the call stops with from retry.ErrNotIdempotent into
// retry.ErrNotRetryable: the call stops either way, for the commit.
func (e *commitError) RetryDecision() retry.Decision {
	if e.check == nil {
		return retry.Undecided
	}
	if d := retry.DefaultClassifier(e.err); d != retry.Undecided {
		return d
	}
	return retry.Retry
}

// notCommitted is the error of an attempt whose context ended after fn
// returned nil and before COMMIT: the transaction was rolled back, so its
// outcome is known.
type notCommitted struct{ cause error }

func (e *notCommitted) Error() string {
	return "retrysql: rolled back, not committed: " + e.cause.Error()
}
func (e *notCommitted) Unwrap() error        { return e.cause }
func (e *notCommitted) OutcomeUnknown() bool { return false }

// errEndedByFn is the error of a COMMIT refused because the transaction had
// already ended: fn committed or rolled it back itself, which Tx cannot
// tell apart.
type errEndedByFn struct{ err error }

func (e errEndedByFn) Error() string {
	return "the transaction ended before Tx committed it (fn must not call Commit or Rollback): " + e.err.Error()
}
func (e errEndedByFn) Unwrap() error { return e.err }
