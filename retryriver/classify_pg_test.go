package retryriver_test

// The core's database rules (retry.DefaultClassifier, retry.OutcomeUnknown)
// against real PostgreSQL errors, as pgx returns them. They live here
// because the root module may not depend on pgx.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
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
)

// postgresPool returns a pool whose connections use a schema of the test's
// own, dropped when it ends; it skips the test without PostgreSQL.
func postgresPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := os.Getenv("RETRY_POSTGRES_URL")
	if dsn == "" {
		t.Skip("RETRY_POSTGRES_URL is not set: run `bash .ci/test` from the repository root, which starts a throwaway PostgreSQL")
	}
	admin, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	schema := newSchema(t, admin)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, schema
}

func sqlState(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// twoAtOnce runs a and b in two goroutines and returns their errors.
func twoAtOnce(a, b func() error) (errA, errB error) {
	var wg sync.WaitGroup
	wg.Go(func() { errA = a() })
	wg.Go(func() { errB = b() })
	wg.Wait()
	return errA, errB
}

// retriedStates returns an Observe that records the SQLSTATE of each
// retried error.
func retriedStates() (func(context.Context, retry.Event), func() []string) {
	var mu sync.Mutex
	var states []string
	return func(_ context.Context, e retry.Event) {
			if !e.Retry {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			states = append(states, sqlState(e.Err))
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), states...)
		}
}

// Two SERIALIZABLE transactions that each read the sum and insert the next
// value conflict; each runs inside retry.Do, whole transaction per attempt,
// and both commit exactly once, in a serial order.
func TestPostgresSerializationFailureRetried(t *testing.T) {
	t.Parallel()
	pool, _ := postgresPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE ledger (who text NOT NULL, total int NOT NULL)`)
	require.NoError(t, err)

	var read sync.WaitGroup // both first attempts have read before either writes
	read.Add(2)
	var attempts atomic.Int32
	onRetry, states := retriedStates()
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond), Observe: onRetry}
	txn := func(who string) func() error {
		first := true
		return func() error {
			return retry.Do(ctx, func(ctx context.Context) error {
				attempts.Add(1)
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				var sum int
				if err := tx.QueryRow(ctx, `SELECT coalesce(sum(total), 0) FROM ledger`).Scan(&sum); err != nil {
					return err
				}
				if first {
					first = false
					read.Done()
					read.Wait()
				}
				if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1, $2)`, who, sum+1); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}, policy)
		}
	}
	errA, errB := twoAtOnce(txn("a"), txn("b"))
	require.NoError(t, errA)
	require.NoError(t, errB)

	assert.Equal(t, []string{"40001"}, states(), "the conflict was retried once, as a serialization failure")
	assert.Equal(t, int32(3), attempts.Load())
	rows, err := pool.Query(ctx, `SELECT who, total FROM ledger ORDER BY total`)
	require.NoError(t, err)
	type entry struct {
		Who   string
		Total int
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	require.NoError(t, err)
	require.Len(t, entries, 2, "each transaction committed exactly once")
	assert.NotEqual(t, entries[0].Who, entries[1].Who)
	assert.Equal(t, []int{1, 2}, []int{entries[0].Total, entries[1].Total}, "the retried one saw the other's commit")
}

// Two transactions that lock two rows in opposite orders deadlock; the
// victim's 40P01 is retried and both commit.
func TestPostgresDeadlockRetried(t *testing.T) {
	t.Parallel()
	pool, _ := postgresPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE account (id int PRIMARY KEY, n int NOT NULL); INSERT INTO account VALUES (1, 0), (2, 0)`)
	require.NoError(t, err)

	var locked sync.WaitGroup // each first attempt holds its first row
	locked.Add(2)
	onRetry, states := retriedStates()
	policy := retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond), Observe: onRetry}
	txn := func(first, second int) func() error {
		waited := false
		return func() error {
			return retry.Do(ctx, func(ctx context.Context) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				// Detect the deadlock quickly rather than after a second.
				if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '50ms'`); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE account SET n = n + 1 WHERE id = $1`, first); err != nil {
					return err
				}
				if !waited {
					waited = true
					locked.Done()
					locked.Wait()
				}
				if _, err := tx.Exec(ctx, `UPDATE account SET n = n + 1 WHERE id = $1`, second); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}, policy)
		}
	}
	errA, errB := twoAtOnce(txn(1, 2), txn(2, 1))
	require.NoError(t, errA)
	require.NoError(t, errB)
	// The victim's retry can win the race for its first row again and
	// deadlock once more: every retry must be a deadlock, and there must be one.
	require.NotEmpty(t, states(), "no deadlock happened")
	for _, s := range states() {
		assert.Equal(t, "40P01", s, "retried errors: %v", states())
	}
	var n1, n2 int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT n FROM account WHERE id = 1), (SELECT n FROM account WHERE id = 2)`).Scan(&n1, &n2))
	assert.Equal(t, []int{2, 2}, []int{n1, n2}, "both transactions committed once")
}

// A unique violation stops at once: one attempt, the error kept.
func TestPostgresUniqueViolationStops(t *testing.T) {
	t.Parallel()
	pool, _ := postgresPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE users (email text PRIMARY KEY); INSERT INTO users VALUES ('a@example.com')`)
	require.NoError(t, err)
	calls := 0
	err = retry.Do(ctx, func(ctx context.Context) error {
		calls++
		_, err := pool.Exec(ctx, `INSERT INTO users VALUES ('a@example.com')`)
		return err
	}, retry.Policy{MaxAttempts: 5, Backoff: retry.Constant(time.Millisecond)})
	require.Error(t, err)
	assert.Equal(t, 1, calls)
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.Equal(t, "23505", sqlState(err))
	assert.False(t, retry.OutcomeUnknown(err))
}

// More real errors, each checked against the core's rules.
func TestPostgresErrorsClassified(t *testing.T) {
	t.Parallel()
	pool, _ := postgresPool(t)
	ctx := t.Context()
	exec := func(sql string) error {
		_, err := pool.Exec(ctx, sql)
		return err
	}
	// A connection whose backend an administrator terminates mid-query.
	// endBackend runs pg_sleep on a connection of its own and, once it is
	// running, ends that backend's statement with how: pg_terminate_backend
	// or pg_cancel_backend.
	endBackend := func(how string) error {
		victim, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer victim.Release()
		var pid int
		require.NoError(t, victim.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Wait until the victim is inside pg_sleep, then end it.
			for range 200 {
				var n int
				_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%' AND state = 'active'`, pid).Scan(&n)
				if n == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			_, _ = pool.Exec(ctx, `SELECT `+how+`($1)`, pid)
		}()
		_, err = victim.Exec(ctx, `SELECT pg_sleep(30)`)
		<-done
		return err
	}
	terminated := func() error { return endBackend("pg_terminate_backend") }
	cancelled := func() error { return endBackend("pg_cancel_backend") }
	refused := func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=5")
		if err == nil {
			conn.Close(ctx)
		}
		return err
	}
	tests := []struct {
		name     string
		err      func() error
		state    string
		decision retry.Decision
		unknown  bool
	}{
		{"syntax error", func() error { return exec(`SELEC 1`) }, "42601", retry.Stop, false},
		{"undefined table", func() error { return exec(`SELECT * FROM no_such_table`) }, "42P01", retry.Stop, false},
		{"division by zero", func() error { return exec(`SELECT 1/0`) }, "22012", retry.Stop, false},
		{"not null violation", func() error {
			return exec(`CREATE TABLE nn (v int NOT NULL); INSERT INTO nn VALUES (NULL)`)
		}, "23502", retry.Stop, false},
		// statement_timeout: the server cancelled the statement and rolled
		// it back. 57014 is retried, as an attempt timeout is, its outcome
		// known; an operator's pg_cancel_backend gives the same code.
		{"statement timeout", func() error {
			// On a connection of its own: the setting lasts for the session.
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `SET statement_timeout = '10ms'; SELECT pg_sleep(1)`)
			return err
		}, "57014", retry.Retry, false},
		{"statement cancelled by an operator", cancelled, "57014", retry.Retry, false},
		{"backend terminated", terminated, "57P01", retry.Retry, false},
		{"connection refused", refused, "", retry.Retry, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			require.Error(t, err)
			assert.Equal(t, tt.state, sqlState(err), "SQLSTATE of %v", err)
			assert.Equal(t, tt.decision, retry.DefaultClassifier(err), "DefaultClassifier(%v)", err)
			assert.Equal(t, tt.unknown, retry.OutcomeUnknown(err), "OutcomeUnknown(%v)", err)
		})
	}
}

// cutOnCommit is a loopback TCP proxy to PostgreSQL that, once the client
// sends a message containing COMMIT, lets the server answer and then closes
// the client's connection without passing the answer on: the commit is
// applied but the client never hears so.
func cutOnCommit(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			var cut atomic.Bool
			go func() { // server to client, until the cut
				defer client.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if cut.Load() || err != nil {
						return // the answer to COMMIT is dropped
					}
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
			go func() { // client to server
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := client.Read(buf)
					if n > 0 {
						if bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit")) {
							cut.Store(true)
						}
						if _, err := server.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						_, _ = io.Copy(io.Discard, client)
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A COMMIT whose connection breaks before its answer arrives may have been
// applied: here it was. pgx reports it as "conn closed" with SafeToRetry()
// false and nothing else in the tree (no SQLSTATE, no io.ErrUnexpectedEOF,
// no net.Error); the core reads SafeToRetry() false as "may have been sent"
// and calls the outcome unknown, and still retries it (Undecided).
func TestPostgresCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	pool, schema := postgresPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE transfer (id int PRIMARY KEY)`)
	require.NoError(t, err)

	u, err := url.Parse(os.Getenv("RETRY_POSTGRES_URL"))
	require.NoError(t, err)
	proxied := *u
	proxied.Host = cutOnCommit(t, u.Host)
	cfg, err := pgx.ParseConfig(proxied.String())
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO transfer VALUES (1)`)
	require.NoError(t, err)
	err = tx.Commit(ctx)
	require.Error(t, err, "the client never heard the commit's answer")

	deadline := time.Now().Add(30 * time.Second)
	var n int
	for n == 0 && time.Now().Before(deadline) { // the server commits, then notices the closed socket
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM transfer`).Scan(&n))
		if n == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	assert.Equal(t, 1, n, "the commit was applied although the client got %v", err)
	assert.False(t, pgconn.SafeToRetry(err), "pgx says the request may have been sent")
	assert.Equal(t, "", sqlState(err))
	assert.NotEqual(t, retry.Stop, retry.DefaultClassifier(err))
	assert.True(t, retry.OutcomeUnknown(err), "the commit was applied, and the client cannot know")
}
