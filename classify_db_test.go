package retry_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// sqlError is shaped like pgx's *pgconn.PgError and lib/pq's *pq.Error: all
// the rules look at is the SQLState method. The tests against a real
// PostgreSQL live in the retryriver module.
type sqlError string

func (e sqlError) Error() string    { return "database: SQLSTATE " + string(e) }
func (e sqlError) SQLState() string { return string(e) }

// safeToRetry is shaped like pgx's connection errors, which say whether
// anything was sent.
type safeToRetry bool

func (e safeToRetry) Error() string     { return fmt.Sprintf("safe to retry: %v", bool(e)) }
func (e safeToRetry) SafeToRetry() bool { return bool(e) }

// outcome is an adapter's error that says whether its attempt may have
// taken effect.
type outcome bool

func (e outcome) Error() string        { return fmt.Sprintf("outcome unknown: %v", bool(e)) }
func (e outcome) OutcomeUnknown() bool { return bool(e) }

func TestDefaultClassifierSQLState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state   string
		want    retry.Decision
		unknown bool
	}{
		{"40001", retry.Retry, false}, // serialization_failure: rolled back
		{"40P01", retry.Retry, false}, // deadlock_detected: rolled back
		{"40003", retry.Retry, true},  // statement_completion_unknown: a COMMIT may have been applied
		{"08000", retry.Retry, true},  // connection_exception
		{"08003", retry.Retry, true},  // connection_does_not_exist
		{"08006", retry.Retry, true},  // connection_failure
		{"08007", retry.Retry, true},  // transaction_resolution_unknown
		{"08001", retry.Retry, false}, // sqlclient_unable_to_establish_sqlconnection
		{"08004", retry.Retry, false}, // sqlserver_rejected_establishment_of_sqlconnection
		{"53300", retry.Retry, false}, // too_many_connections
		{"57P01", retry.Retry, false}, // admin_shutdown
		{"57P02", retry.Retry, false}, // crash_shutdown
		{"57P03", retry.Retry, false}, // cannot_connect_now
		{"57014", retry.Retry, false}, // query_canceled: statement_timeout, or pg_cancel_backend; rolled back
		{"23505", retry.Stop, false},  // unique_violation
		{"23503", retry.Stop, false},  // foreign_key_violation
		{"22012", retry.Stop, false},  // division_by_zero
		{"22P02", retry.Stop, false},  // invalid_text_representation
		{"42601", retry.Stop, false},  // syntax_error
		{"42501", retry.Stop, false},  // insufficient_privilege
		{"42P01", retry.Stop, false},  // undefined_table
		{"40002", retry.Undecided, false},
		{"55P03", retry.Undecided, false}, // lock_not_available
		{"XX000", retry.Undecided, false}, // internal_error
		{"", retry.Undecided, false},
		{"4", retry.Undecided, false},
		{"080000", retry.Undecided, false},
	}
	for _, tt := range tests {
		err := fmt.Errorf("commit: %w", sqlError(tt.state))
		got := retry.DefaultClassifier(err)
		assert.Equal(t, tt.want, got, "DefaultClassifier(SQLSTATE %q) = %v, want %v", tt.state, got, tt.want)
		unknown := retry.OutcomeUnknown(err)
		assert.Equal(t, tt.unknown, unknown, "OutcomeUnknown(SQLSTATE %q) = %v, want %v", tt.state, unknown, tt.unknown)
	}
}

func TestDefaultClassifierDriverErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		want    retry.Decision
		unknown bool
	}{
		{"driver.ErrBadConn", fmt.Errorf("query: %w", driver.ErrBadConn), retry.Retry, false},
		{"SafeToRetry true", safeToRetry(true), retry.Retry, false},
		{"SafeToRetry false: maybe sent", safeToRetry(false), retry.Undecided, true},
		{"SafeToRetry false with a SQLSTATE: the server answered", errors.Join(safeToRetry(false), sqlError("23505")), retry.Stop, false},
		// SafeToRetry proves nothing was sent, so even a timeout on the way
		// (while dialing, say) leaves nothing to reconcile.
		{"SafeToRetry over a timeout", errors.Join(safeToRetry(true), timeoutError{}), retry.Retry, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.DefaultClassifier(tt.err)
			assert.Equal(t, tt.want, got, "DefaultClassifier = %v, want %v", got, tt.want)
			unknown := retry.OutcomeUnknown(tt.err)
			assert.Equal(t, tt.unknown, unknown, "OutcomeUnknown = %v, want %v", unknown, tt.unknown)
		})
	}
}

// timeoutError is a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestOutcomeUnknownMethodDecides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"says unknown", outcome(true), true},
		{"says known", outcome(false), false},
		{"overrides a timeout inside", fmt.Errorf("%w: %w", outcome(false), timeoutError{}), false},
		{"overrides a refusal inside", fmt.Errorf("%w: %w", outcome(true), sqlError("08001")), true},
		{"outermost wins", fmt.Errorf("%w: %w", outcome(true), outcome(false)), true},
		{"a nested *Error answers for its attempts", &retry.Error{Attempts: 2, OutcomeUnknown: true, Last: errors.New("x")}, true},
		{"a nested *Error that knows", &retry.Error{Attempts: 2, Last: timeoutError{}}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.OutcomeUnknown(tt.err)
			assert.Equal(t, tt.want, got, "OutcomeUnknown(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

func TestOutcomeUnknownDoesNotAllocate(t *testing.T) {
	err := fmt.Errorf("commit: %w", sqlError("08006"))
	allocs := testing.AllocsPerRun(100, func() { retry.OutcomeUnknown(err) })
	assert.Zero(t, allocs, "OutcomeUnknown allocated %v times per call", allocs)
	allocs = testing.AllocsPerRun(100, func() { retry.DefaultClassifier(err) })
	assert.Zero(t, allocs, "DefaultClassifier allocated %v times per call", allocs)
}

// A nil pointer returned as an error (a common Go slip) is a failure like
// any other, never a panic in the loop.
func TestTypedNilError(t *testing.T) {
	t.Parallel()
	var uerr *url.Error
	err := retry.Do(t.Context(), func(context.Context) error { return uerr },
		retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0)})
	require.ErrorIs(t, err, retry.ErrExhausted)
	assert.Contains(t, err.Error(), "*url.Error(nil)")
	assert.False(t, retry.OutcomeUnknown(uerr))
	assert.Equal(t, retry.Undecided, retry.DefaultClassifier(uerr))
	assert.Equal(t, retry.Undecided, retry.DefaultClassifier(fmt.Errorf("wrapped: %w", uerr)))
}
