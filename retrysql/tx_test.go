package retrysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrysql"
)

// quick retries at once, up to 5 attempts.
var quick = retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(0)}

// openBank opens a database/sql pool on a new bank.
func openBank(t *testing.T, balances map[string]int64) (*sql.DB, *bank) {
	t.Helper()
	b := newBank(balances)
	db := sql.OpenDB(b)
	t.Cleanup(func() { db.Close() })
	return db, b
}

var errInsufficient = errors.New("insufficient funds")

// transfer moves amount from one account to another, refusing an
// overdraft, and records key if it is not empty. calls counts its runs.
func transfer(from, to string, amount int64, key string, calls *atomic.Int32) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		if calls != nil {
			calls.Add(1)
		}
		if key != "" {
			if _, err := tx.ExecContext(ctx, "key", key); err != nil {
				return err
			}
		}
		var balance int64
		if err := tx.QueryRowContext(ctx, "balance", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return retry.Permanent(errInsufficient)
		}
		if _, err := tx.ExecContext(ctx, "add", from, -amount); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "add", to, amount)
		return err
	}
}

// asRetryError returns err as a *retry.Error, failing the test if it is not one.
func asRetryError(t *testing.T, err error) *retry.Error {
	t.Helper()
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	return re
}

func TestTxCommitsOnFirstTry(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	var calls atomic.Int32
	require.NoError(t, retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", &calls)))
	assert.Equal(t, int32(1), calls.Load())
	begins, commits, rollbacks := b.counts()
	assert.Equal(t, []int{1, 1, 0}, []int{begins, commits, rollbacks}, "begins, commits, rollbacks")
	assert.Equal(t, int64(70), b.get("alice"))
	assert.Equal(t, int64(30), b.get("bob"))
	assert.Zero(t, db.Stats().InUse)
}

// A serialization failure in a statement aborts the transaction: the whole
// transaction runs again, from BEGIN, on a fresh transaction.
func TestTxRetriesWholeTransaction(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "add", err: sqlError("40001")}, fault{stmt: "add", err: sqlError("40P01")})
	var calls atomic.Int32
	var retried []error
	p := quick
	p.Observe = func(_ context.Context, e retry.Event) {
		if e.Retry {
			retried = append(retried, e.Err)
		}
	}
	require.NoError(t, retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", &calls), retrysql.WithPolicy(p)))
	assert.Equal(t, int32(3), calls.Load(), "fn ran once per attempt")
	begins, commits, rollbacks := b.counts()
	assert.Equal(t, []int{3, 1, 2}, []int{begins, commits, rollbacks}, "begins, commits, rollbacks")
	assert.Equal(t, []error{sqlError("40001"), sqlError("40P01")}, retried)
	assert.Equal(t, int64(70), b.get("alice"), "debited once")
	assert.Equal(t, int64(30), b.get("bob"))
}

// When another transaction changes what this one read, its COMMIT fails
// with 40001 and the retry reads again: here the balance it reads the
// second time no longer covers the transfer, so it stops, with no overdraft.
// Retrying the failed statement instead would have reused the first read.
func TestTxRetryReadsAgain(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	var calls atomic.Int32
	pay := transfer("alice", "bob", 80, "", &calls)
	err := retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
		if err := pay(ctx, tx); err != nil || calls.Load() > 1 {
			return err
		}
		// Meanwhile, on another connection, carol takes 50 from alice.
		return retrysql.Tx(ctx, db, transfer("alice", "carol", 50, "", nil))
	}, retrysql.WithPolicy(quick))
	require.ErrorIs(t, err, errInsufficient)
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.Equal(t, int32(2), calls.Load())
	assert.Equal(t, int64(50), b.get("alice"))
	assert.Equal(t, int64(0), b.get("bob"), "the first attempt's transfer was rolled back, the second refused")
	assert.Equal(t, int64(50), b.get("carol"))
}

// An integrity violation stops at once: another attempt would fail the same way.
func TestTxStopsOnIntegrityViolation(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "add", err: sqlError("23505")})
	var calls atomic.Int32
	err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", &calls), retrysql.WithPolicy(quick))
	re := asRetryError(t, err)
	assert.ErrorIs(t, re.Reason, retry.ErrNotRetryable)
	assert.Equal(t, sqlError("23505"), re.Last)
	assert.Equal(t, 1, re.Attempts)
	assert.False(t, re.OutcomeUnknown)
	assert.Equal(t, int32(1), calls.Load())
	_, commits, rollbacks := b.counts()
	assert.Equal(t, []int{0, 1}, []int{commits, rollbacks}, "commits, rollbacks")
	assert.Equal(t, int64(100), b.get("alice"))
}

// Attempts are bounded by the policy, and the last error is kept.
func TestTxExhausted(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "balance", err: sqlError("40001")}, fault{stmt: "balance", err: sqlError("40001")})
	p := quick
	p.MaxAttempts = 2
	err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", nil), retrysql.WithPolicy(p))
	re := asRetryError(t, err)
	assert.ErrorIs(t, re.Reason, retry.ErrExhausted)
	assert.Equal(t, 2, re.Attempts)
	assert.Equal(t, sqlError("40001"), re.Last)
	assert.False(t, re.OutcomeUnknown)
	assert.Equal(t, int64(100), b.get("alice"))
}

// A BEGIN on a connection found broken is retried on another one.
func TestTxRetriesBadConnAtBegin(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "begin", err: driver.ErrBadConn})
	require.NoError(t, retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", nil), retrysql.WithPolicy(quick)))
	assert.Equal(t, int64(70), b.get("alice"))
}

// Each attempt ends its transaction before the retry loop waits, so no
// connection is held through a backoff.
func TestTxConnectionBackBeforeWait(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "add", err: sqlError("40001")}, fault{stmt: "commit", err: sqlError("40001")})
	var inUse []int
	p := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond)}
	p.Observe = func(_ context.Context, e retry.Event) {
		if e.Retry {
			inUse = append(inUse, db.Stats().InUse)
		}
	}
	require.NoError(t, retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", nil), retrysql.WithPolicy(p)))
	assert.Equal(t, []int{0, 0}, inUse, "connections in use at each wait")
}

// The transaction options reach every attempt's BEGIN.
func TestTxOptions(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "balance", err: sqlError("40001")})
	err := retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
		var n int64
		return tx.QueryRowContext(ctx, "balance", "alice").Scan(&n)
	}, retrysql.WithPolicy(quick), retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true}))
	require.NoError(t, err)
	want := driver.TxOptions{Isolation: driver.IsolationLevel(sql.LevelSerializable), ReadOnly: true}
	assert.Equal(t, []driver.TxOptions{want, want}, b.txOpts)
}

// Options apply in order: a later one of a kind replaces an earlier one,
// and a nil one does nothing.
func TestTxOptionsApplyInOrder(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "balance", err: sqlError("40001")})
	err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "", nil),
		retrysql.WithPolicy(quick), nil, retrysql.WithPolicy(retry.Policy{MaxAttempts: 1}))
	re := asRetryError(t, err)
	assert.Equal(t, 1, re.Attempts)
	assert.ErrorIs(t, re.Reason, retry.ErrExhausted)
}

// keyCheck is a commit check that asks the database, through db, whether
// the key was committed.
func keyCheck(db *sql.DB, key string, asked *int) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		*asked++
		var found bool
		err := db.QueryRowContext(ctx, "haskey", key).Scan(&found)
		return found, err
	}
}

// What a failed COMMIT leads to, for each way it can fail.
func TestTxCommitFailures(t *testing.T) {
	t.Parallel()
	errCheck := errors.New("check failed")
	tests := []struct {
		name      string
		commit    fault
		check     bool
		checkErr  error // the check's query fails with it
		wantErr   error // the Reason; nil: Tx succeeds
		unknown   bool
		attempts  int // attempts made, when Tx fails
		begins    int
		moved     bool // the transfer was applied, once
		askedWant int
	}{
		{name: "serialization failure at commit", commit: fault{err: sqlError("40001")}, begins: 2, moved: true},
		{name: "deferred unique violation", commit: fault{err: sqlError("23505")}, wantErr: retry.ErrNotRetryable, attempts: 1, begins: 1},
		{name: "bad connection, nothing sent", commit: fault{err: driver.ErrBadConn}, begins: 2, moved: true},
		{name: "reply lost after commit, no check", commit: fault{err: lostReply{}, applied: true},
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1, moved: true},
		{name: "connection cut before commit, no check", commit: fault{err: lostReply{}},
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1},
		{name: "transaction resolution unknown (08007)", commit: fault{err: sqlError("08007"), applied: true},
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1, moved: true},
		{name: "ambiguous result (40003)", commit: fault{err: sqlError("40003")},
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1},
		// pgx reports a COMMIT cut by a cancel as a bare context.Canceled,
		// which stops a call as not retryable; the outcome is still unknown.
		{name: "cancelled while under way", commit: fault{err: context.Canceled, applied: true},
			wantErr: retry.ErrNotRetryable, unknown: true, attempts: 1, begins: 1, moved: true},
		{name: "reply lost after commit, check finds it", commit: fault{err: lostReply{}, applied: true}, check: true,
			begins: 1, moved: true, askedWant: 1},
		{name: "connection cut before commit, check finds nothing", commit: fault{err: lostReply{}}, check: true,
			begins: 2, moved: true, askedWant: 1},
		{name: "check fails", commit: fault{err: lostReply{}, applied: true}, check: true, checkErr: errCheck,
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1, moved: true, askedWant: 1},
		// The check's own error would stop the call as not retryable; the
		// reason stays the commit's.
		{name: "check fails with a syntax error", commit: fault{err: lostReply{}}, check: true, checkErr: sqlError("42601"),
			wantErr: retry.ErrNotIdempotent, unknown: true, attempts: 1, begins: 1, askedWant: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, b := openBank(t, map[string]int64{"alice": 100})
			// One connection: the check can only run once the failed
			// attempt's connection is given back (or discarded).
			db.SetMaxOpenConns(1)
			tt.commit.stmt = "commit"
			b.inject(tt.commit)
			if tt.checkErr != nil {
				b.inject(fault{stmt: "haskey", err: tt.checkErr})
			}
			opts := []retrysql.TxOption{retrysql.WithPolicy(quick)}
			asked := 0
			if tt.check {
				opts = append(opts, retrysql.WithCommitCheck(keyCheck(db, "t1", &asked)))
			}
			err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "t1", nil), opts...)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				re := asRetryError(t, err)
				assert.ErrorIs(t, re.Reason, tt.wantErr, "Reason")
				assert.ErrorIs(t, err, tt.commit.err, "the commit's error is kept")
				if tt.checkErr != nil {
					assert.ErrorIs(t, err, tt.checkErr, "the check's error is kept")
				}
				assert.Equal(t, tt.unknown, re.OutcomeUnknown, "OutcomeUnknown")
				assert.Equal(t, tt.attempts, re.Attempts, "Attempts")
			}
			begins, _, _ := b.counts()
			assert.Equal(t, tt.begins, begins, "begins")
			assert.Equal(t, tt.askedWant, asked, "checks asked")
			want := int64(100)
			if tt.moved {
				want = 70
			}
			assert.Equal(t, want, b.get("alice"), "alice's balance")
			assert.Equal(t, 100-want, b.get("bob"), "bob's balance")
		})
	}
}

// A check that finds nothing committed makes the outcome known: a call
// that then runs out of attempts does not report it as unknown.
func TestTxCheckedCommitIsKnown(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	b.inject(fault{stmt: "commit", err: lostReply{}}, fault{stmt: "commit", err: lostReply{}})
	asked := 0
	p := quick
	p.MaxAttempts = 2
	err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "t1", nil),
		retrysql.WithPolicy(p), retrysql.WithCommitCheck(keyCheck(db, "t1", &asked)))
	re := asRetryError(t, err)
	assert.ErrorIs(t, re.Reason, retry.ErrExhausted)
	assert.False(t, re.OutcomeUnknown)
	assert.Equal(t, 2, asked)
	assert.ErrorIs(t, err, lostReply{})
	assert.Equal(t, int64(100), b.get("alice"))
}

// A context cancelled while fn runs: the transaction is rolled back, never
// committed, and the call stops with the context's cause. Its outcome is
// known when fn returned nil and Tx declined to commit; when fn returned the
// cancellation, the core counts it unknown, as for any attempt cancelled in
// flight: fn may have done work outside the transaction.
func TestTxCancelledMidTransaction(t *testing.T) {
	t.Parallel()
	for _, fnErr := range []bool{true, false} {
		db, b := openBank(t, map[string]int64{"alice": 100})
		ctx, cancel := context.WithCancel(t.Context())
		pay := transfer("alice", "bob", 30, "", nil)
		err := retrysql.Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			if err := pay(ctx, tx); err != nil {
				return err
			}
			cancel()
			if fnErr {
				_, err := tx.ExecContext(ctx, "add", "alice", int64(-1))
				return err
			}
			return nil // fn did not notice: Tx must not commit anyway
		}, retrysql.WithPolicy(quick))
		re := asRetryError(t, err)
		assert.ErrorIs(t, re.Reason, context.Canceled, "fn returned an error: %v", fnErr)
		assert.Equal(t, fnErr, re.OutcomeUnknown, "fn returned an error: %v", fnErr)
		assert.Equal(t, 1, re.Attempts)
		_, commits, _ := b.counts()
		assert.Zero(t, commits, "fn returned an error: %v", fnErr)
		assert.Equal(t, int64(100), b.get("alice"))
	}
}

// A per-attempt timeout covers the whole transaction, COMMIT included: a
// COMMIT it cuts has an unknown outcome. The check runs on the caller's
// context, which the attempt's timeout does not end.
func TestTxAttemptTimeoutDuringCommit(t *testing.T) {
	t.Parallel()
	for _, check := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			b := newBank(map[string]int64{"alice": 100})
			db := sql.OpenDB(b)
			defer db.Close()
			// The server applies the commit, and its reply arrives after the attempt's timeout.
			b.inject(fault{stmt: "commit", block: true, applied: true, err: context.DeadlineExceeded})
			opts := []retrysql.TxOption{retrysql.WithPolicy(retry.Policy{MaxAttempts: 3, AttemptTimeout: time.Second})}
			asked := 0
			if check {
				opts = append(opts, retrysql.WithCommitCheck(keyCheck(db, "t1", &asked)))
			}
			start := time.Now()
			err := retrysql.Tx(t.Context(), db, transfer("alice", "bob", 30, "t1", nil), opts...)
			assert.Equal(t, time.Second, time.Since(start))
			if check {
				require.NoError(t, err)
				assert.Equal(t, 1, asked)
			} else {
				re := asRetryError(t, err)
				assert.ErrorIs(t, re.Reason, retry.ErrNotIdempotent)
				assert.True(t, re.OutcomeUnknown)
				assert.Equal(t, 1, re.Attempts)
			}
			begins, commits, _ := b.counts()
			assert.Equal(t, []int{1, 1}, []int{begins, commits}, "begins, commits")
			assert.Equal(t, int64(70), b.get("alice"))
		})
	}
}

// A caller who cancels while COMMIT is under way gets the context's cause,
// with the outcome unknown; the check is not asked, since its context has
// ended too.
func TestTxCancelledDuringCommit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBank(map[string]int64{"alice": 100})
		db := sql.OpenDB(b)
		defer db.Close()
		b.inject(fault{stmt: "commit", block: true, applied: true, err: context.Canceled})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		asked := 0
		err := retrysql.Tx(ctx, db, transfer("alice", "bob", 30, "t1", nil),
			retrysql.WithPolicy(quick), retrysql.WithCommitCheck(keyCheck(db, "t1", &asked)))
		re := asRetryError(t, err)
		assert.ErrorIs(t, re.Reason, context.Canceled)
		assert.True(t, re.OutcomeUnknown)
		assert.Zero(t, asked)
		assert.Equal(t, int64(70), b.get("alice"), "it had committed")
	})
}

// A transaction that outlives its attempt's timeout in fn is rolled back,
// not committed, and retried: its outcome is known.
func TestTxAttemptTimeoutBeforeCommit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		db := sql.OpenDB(newBank(map[string]int64{"alice": 100}))
		defer db.Close()
		attempts := 0
		var observed []bool
		p := retry.Policy{MaxAttempts: 2, AttemptTimeout: time.Second, Backoff: retry.Constant(time.Second)}
		p.Observe = func(_ context.Context, e retry.Event) {
			if !e.Done {
				observed = append(observed, e.OutcomeUnknown)
			}
		}
		err := retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
			attempts++
			time.Sleep(2 * time.Second) // fn ignores its context
			return nil
		}, retrysql.WithPolicy(p))
		re := asRetryError(t, err)
		assert.ErrorIs(t, re.Reason, retry.ErrExhausted)
		assert.ErrorIs(t, re.Last, context.DeadlineExceeded)
		assert.False(t, re.OutcomeUnknown)
		assert.Equal(t, []bool{false, false}, observed, "each attempt's outcome is known")
		assert.Equal(t, 2, attempts)
	})
}

// A panic in fn rolls the transaction back, gives its connection back and
// propagates unchanged.
func TestTxPanicRollsBack(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	pay := transfer("alice", "bob", 30, "", nil)
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_ = retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
			if err := pay(ctx, tx); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	_, commits, rollbacks := b.counts()
	assert.Equal(t, []int{0, 1}, []int{commits, rollbacks}, "commits, rollbacks")
	assert.Zero(t, db.Stats().InUse)
	assert.Equal(t, int64(100), b.get("alice"))
}

// fn must not end the transaction itself; if it does, Tx cannot tell a
// commit from a rollback, so it stops, outcome unknown.
func TestTxFnEndsTransaction(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	pay := transfer("alice", "bob", 30, "", nil)
	var calls atomic.Int32
	err := retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
		calls.Add(1)
		if err := pay(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	}, retrysql.WithPolicy(quick))
	re := asRetryError(t, err)
	assert.ErrorIs(t, re.Reason, retry.ErrNotRetryable)
	assert.ErrorIs(t, err, sql.ErrTxDone)
	assert.True(t, re.OutcomeUnknown)
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, int64(70), b.get("alice"), "fn's own commit went through, once")
}

// A *sql.Conn serves too: every attempt runs on that one connection.
func TestTxOnConn(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	b.inject(fault{stmt: "add", err: sqlError("40001")})
	require.NoError(t, retrysql.Tx(t.Context(), conn, transfer("alice", "bob", 30, "", nil), retrysql.WithPolicy(quick)))
	assert.Equal(t, int64(70), b.get("alice"))
}

func TestTxBadInput(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	fn := transfer("alice", "bob", 30, "", nil)
	assert.EqualError(t, retrysql.Tx(t.Context(), nil, fn), "retrysql: nil db")
	assert.EqualError(t, retrysql.Tx(t.Context(), (*sql.DB)(nil), fn), "retrysql: nil db")
	assert.EqualError(t, retrysql.Tx(t.Context(), (*sql.Conn)(nil), fn), "retrysql: nil db")
	assert.EqualError(t, retrysql.Tx(t.Context(), db, nil), "retrysql: nil fn")
	begins, _, _ := b.counts()
	assert.Zero(t, begins)
	//lint:ignore SA1012 a nil context is documented to mean context.Background
	require.NoError(t, retrysql.Tx(nil, db, fn, nil))
	assert.Equal(t, int64(70), b.get("alice"))
}

// Concurrent transfers that conflict: each commits once, and money is
// neither made nor lost. The first transfer of every goroutine reads, then
// waits until all have read before it writes, so that conflicts are
// certain: 8 transfers over 4 accounts share accounts, and only the first
// to commit of those sharing one can succeed. (The same on PostgreSQL is in
// the retrypg module.)
func TestTxConcurrentTransfers(t *testing.T) {
	t.Parallel()
	accounts := []string{"a", "b", "c", "d"}
	start := map[string]int64{}
	for _, a := range accounts {
		start[a] = 1000
	}
	db, b := openBank(t, start)
	const goroutines, each = 8, 100
	p := retry.Policy{MaxAttempts: -1, Backoff: retry.Exponential{Base: 10 * time.Microsecond, Cap: time.Millisecond}}
	var retries atomic.Int32
	p.Observe = func(_ context.Context, e retry.Event) {
		if e.Retry {
			retries.Add(1)
		}
	}
	var read sync.WaitGroup
	read.Add(goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				from, to := accounts[(g+i)%len(accounts)], accounts[(g+2*i+1)%len(accounts)]
				if from == to {
					to = accounts[(g+2*i+2)%len(accounts)]
				}
				pay := transfer(from, to, 1, fmt.Sprintf("%d-%d", g, i), nil)
				first := i == 0
				errs <- retrysql.Tx(t.Context(), db, func(ctx context.Context, tx *sql.Tx) error {
					var n int64
					if err := tx.QueryRowContext(ctx, "balance", from).Scan(&n); err != nil {
						return err
					}
					if first {
						first = false
						read.Done()
						read.Wait()
					}
					return pay(ctx, tx)
				}, retrysql.WithPolicy(p))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var total int64
	for _, a := range accounts {
		total += b.get(a)
	}
	assert.Equal(t, int64(1000*len(accounts)), total, "total balance")
	_, commits, _ := b.counts()
	assert.Equal(t, goroutines*each, commits, "every transfer committed once")
	assert.Positive(t, retries.Load(), "transfers conflicted and were retried")
	t.Logf("%d transfers, %d retries", commits, retries.Load())
}

// A context already done begins nothing.
func TestTxContextDoneBeforeStart(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := retrysql.Tx(ctx, db, transfer("alice", "bob", 30, "", nil))
	re := asRetryError(t, err)
	assert.ErrorIs(t, re.Reason, context.Canceled)
	assert.Zero(t, re.Attempts)
	begins, _, _ := b.counts()
	assert.Zero(t, begins)
}

// A transaction is never in flight twice: under a policy that hedges, one
// Tx call whose transaction is slower than the hedge delay begins and
// commits one transaction.
func TestTxNeverHedged(t *testing.T) {
	t.Parallel()
	db, b := openBank(t, map[string]int64{"alice": 100})
	var calls, inFlight, most atomic.Int32
	slow := func(ctx context.Context, tx *sql.Tx) error {
		if n := inFlight.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer inFlight.Add(-1)
		time.Sleep(30 * time.Millisecond) // far beyond the hedge delay
		return transfer("alice", "bob", 30, "", &calls)(ctx, tx)
	}
	p := retry.Policy{HedgeDelay: retry.Constant(time.Millisecond), MaxInFlight: 3}
	require.NoError(t, retrysql.Tx(t.Context(), db, slow, retrysql.WithPolicy(p)))
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, int32(1), most.Load(), "transactions in flight at once")
	begins, commits, _ := b.counts()
	assert.Equal(t, []int{1, 1}, []int{begins, commits}, "begins, commits")
	assert.Equal(t, int64(70), b.get("alice"))
}
