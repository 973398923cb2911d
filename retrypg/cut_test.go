package retrypg_test

// A COMMIT whose reply is cut, on real PostgreSQL through a loopback proxy
// that, on the client's COMMIT, closes the client's connection and then
// forwards the COMMIT before closing the server's (the server commits, the
// client never hears) or does not (the server never sees it, and rolls back
// when it notices the connection is gone). The client cannot tell the two
// apart; only a check can.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrypg"
	"github.com/seed93a044d1/retry/retrysql"
)

const cutSchema = `CREATE TABLE account (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO account VALUES (1, 1000000);
CREATE TABLE done (key text PRIMARY KEY)`

const (
	debitAccount = `UPDATE account SET balance = balance - 10 WHERE id = 1`
	recordKey    = `INSERT INTO done (key) VALUES ($1)`
	probeKey     = `INSERT INTO done (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`
)

// pgxCommitted is the commit check of the package documentation: an INSERT
// of the key, rolled back, which waits for a transaction that still holds
// it, so a COMMIT still under way is waited for, not missed.
func pgxCommitted(pool *pgxpool.Pool, key string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		probe, err := pool.Begin(ctx)
		if err != nil {
			return false, err
		}
		defer probe.Rollback(ctx)
		tag, err := probe.Exec(ctx, probeKey, key)
		return err == nil && tag.RowsAffected() == 0, err
	}
}

// sqlCommitted is the same check through database/sql.
func sqlCommitted(db *sql.DB, key string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		probe, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer probe.Rollback()
		res, err := probe.ExecContext(ctx, probeKey, key)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 0, err
	}
}

// debitVia makes one debit of account 1, recording key, through the helper
// under test, with the commit check if check is set.
type debitVia func(ctx context.Context, key string, check bool, p retry.Policy) error

func TestCommitCut(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(cutSchema)
	u, err := url.Parse(d.url)
	require.NoError(t, err)
	cutter := newCommitCutter(t, u.Host)
	cutter.dropCancels.Store(true) // a cut network: nothing pgx sends afterwards arrives
	direct := d.pool("", 2)

	viaPgx := func(ctx context.Context, key string, check bool, p retry.Policy) error {
		pool := d.pool(cutter.addr(), 4)
		opts := []retrypg.TxOption{retrypg.WithPolicy(p)}
		if check {
			opts = append(opts, retrypg.WithCommitCheck(pgxCommitted(pool, key)))
		}
		return retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, recordKey, key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, debitAccount)
			return err
		}, opts...)
	}
	viaSQL := func(ctx context.Context, key string, check bool, p retry.Policy) error {
		db := d.sqlDB(cutter.addr())
		opts := []retrysql.TxOption{retrysql.WithPolicy(p)}
		if check {
			opts = append(opts, retrysql.WithCommitCheck(sqlCommitted(db, key)))
		}
		return retrysql.Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, recordKey, key); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, debitAccount)
			return err
		}, opts...)
	}

	tests := []struct {
		name     string
		mode     cutMode
		check    bool
		ok       bool // Tx returns nil; else ErrNotIdempotent, outcome unknown
		attempts int
		debited  bool
	}{
		{"reply lost, no check", forwardThen, false, false, 1, true},
		{"commit never arrived, no check", dropThen, false, false, 1, false},
		{"reply lost, check finds it committed", forwardThen, true, true, 1, true},
		{"commit never arrived, check finds nothing and it runs again", dropThen, true, true, 2, true},
	}
	const runs = 5
	for _, via := range []struct {
		name  string
		debit debitVia
	}{{"retrypg", viaPgx}, {"retrysql", viaSQL}} {
		for _, tt := range tests {
			t.Run(via.name+"/"+tt.name, func(t *testing.T) {
				for run := range runs {
					key := fmt.Sprintf("%s/%s/%d", via.name, tt.name, run)
					before := balance(t, direct)
					cuts := cutter.cuts.Load()
					attempts := 0
					p := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Millisecond)}
					p.Observe = func(_ context.Context, e retry.Event) {
						if e.Done {
							attempts = e.Attempt
						}
					}
					cutter.arm(tt.mode)
					err := via.debit(t.Context(), key, tt.check, p)
					require.Equal(t, cuts+1, cutter.cuts.Load(), "run %d: the proxy cut one COMMIT", run)
					if tt.ok {
						require.NoError(t, err, "run %d", run)
					} else {
						var re *retry.Error
						require.ErrorAs(t, err, &re, "run %d", run)
						assert.ErrorIs(t, re.Reason, retry.ErrNotIdempotent, "run %d", run)
						assert.True(t, re.OutcomeUnknown, "run %d", run)
						assert.False(t, pgconn.SafeToRetry(re.Last), "run %d: pgx says the COMMIT may have been sent", run)
					}
					assert.Equal(t, tt.attempts, attempts, "run %d: attempts", run)
					// The probe waits for the server to be done with the old
					// transaction, so what it says is final.
					committed, err := pgxCommitted(direct, key)(t.Context())
					require.NoError(t, err)
					assert.Equal(t, tt.debited, committed, "run %d: committed", run)
					want := before
					if tt.debited {
						want -= 10
					}
					assert.Equal(t, want, balance(t, direct), "run %d: debited at most once, and once if committed", run)
				}
			})
		}
	}
}

func balance(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var b int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT balance FROM account WHERE id = 1`).Scan(&b))
	return b
}

// The check runs while the server may still be committing: here a deferred
// trigger makes the server's COMMIT wait for an advisory lock the test
// holds, and the proxy cuts the connection as soon as it has forwarded the
// COMMIT, and drops the cancel request pgx then sends (which would cancel
// the waiting COMMIT). A check that SELECTs the key runs before the commit
// is visible, answers "not committed", and the transaction runs again (its
// INSERT of the key then waits for the old transaction and fails with 23505
// once that commits: the unique key is what keeps the debit single). The
// documented probe waits for the old transaction instead, and answers right.
func TestCommitCheckWaitsForCommitInFlight(t *testing.T) {
	t.Parallel()
	d := newDatabase(t)
	d.exec(cutSchema + `;
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(42); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON done DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`)
	u, err := url.Parse(d.url)
	require.NoError(t, err)
	cutter := newCommitCutter(t, u.Host)
	cutter.dropCancels.Store(true)
	direct := d.pool("", 2)
	pool := d.pool(cutter.addr(), 4)
	ctx := t.Context()

	// hold takes the lock the COMMIT will wait for, and returns its release.
	hold := func() func() {
		conn, err := pgx.ConnectConfig(ctx, d.config(""))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock(42)`)
		require.NoError(t, err)
		return sync.OnceFunc(func() { conn.Close(context.Background()) })
	}
	debit := func(key string, check func(context.Context) (bool, error)) (int, error) {
		attempts := 0
		p := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(time.Millisecond)}
		p.Observe = func(_ context.Context, e retry.Event) {
			if e.Done {
				attempts = e.Attempt
			}
		}
		cutter.arm(forwardThen)
		err := retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, recordKey, key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, debitAccount)
			return err
		}, retrypg.WithPolicy(p), retrypg.WithCommitCheck(check))
		return attempts, err
	}

	t.Run("probe", func(t *testing.T) {
		before := balance(t, direct)
		release := hold()
		defer release()
		waited := make(chan bool, 1)
		probe := pgxCommitted(pool, "probe")
		check := func(ctx context.Context) (bool, error) {
			// Release the COMMIT only once the probe waits for it (or,
			// should it never, after long enough to fail the test
			// instead of hanging it).
			go func() {
				defer release()
				for giveUp := time.Now().Add(30 * time.Second); ctx.Err() == nil && time.Now().Before(giveUp); {
					var n int
					// A probe blocked by the COMMIT that waits for the test's lock.
					err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity w
						WHERE w.wait_event_type = 'Lock' AND w.query LIKE 'INSERT INTO done%ON CONFLICT%'
						AND EXISTS (SELECT 1 FROM pg_stat_activity b
							WHERE b.pid = ANY (pg_blocking_pids(w.pid)) AND b.wait_event = 'advisory')`).Scan(&n)
					if err == nil && n == 1 {
						waited <- true
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				waited <- false
			}()
			return probe(ctx)
		}
		attempts, err := debit("probe", check)
		require.NoError(t, err)
		assert.True(t, <-waited, "the probe waited for the COMMIT under way")
		assert.Equal(t, 1, attempts, "and found it committed")
		assert.Equal(t, before-10, balance(t, direct))
	})
	t.Run("select", func(t *testing.T) {
		before := balance(t, direct)
		release := hold()
		defer release()
		var answers []bool
		check := func(ctx context.Context) (bool, error) {
			defer release() // the COMMIT under way may finish once the SELECT has answered
			var found bool
			err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM done WHERE key = 'select')`).Scan(&found)
			answers = append(answers, found)
			return found, err
		}
		attempts, err := debit("select", check)
		assert.Equal(t, []bool{false}, answers, "the SELECT ran before the commit was visible")
		assert.Equal(t, 2, attempts, "so the transaction ran again")
		assert.ErrorIs(t, err, retry.ErrNotRetryable)
		assert.Equal(t, "23505", sqlState(err), "and its key, committed meanwhile, stopped it")
		assert.Equal(t, before-10, balance(t, direct), "debited once: by the first attempt")
	})
}
