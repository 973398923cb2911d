package retryriver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// queue is what the tests use of a *river.Client, whatever its driver.
type queue interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobCancel(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobList(ctx context.Context, params *river.JobListParams) (*river.JobListResult, error)
}

// backend is a River database for one test: a SQLite file of its own, or a
// PostgreSQL schema of its own, removed when the test ends.
type backend struct {
	name string
	// client makes a River client on this database with cfg.
	client func(t testing.TB, cfg *river.Config) queue
	// query runs a reconciliation query and returns the IDs of the jobs it
	// selects, in order.
	query func(t testing.TB, q string) []int64
	// reconcile is the package documentation's query for this database.
	reconcile string
}

// The reconciliation queries of the package documentation, word for word
// (TestDocumentedQueries checks).
const (
	reconcilePostgres = `SELECT id, kind, args, state, metadata->'retry_outcome_unknown' AS unknown_attempts, errors
FROM river_job
WHERE state IN ('cancelled', 'discarded')
  AND (metadata ? 'retry_outcome_unknown'
    OR EXISTS (SELECT 1 FROM unnest(errors) AS e WHERE e->>'error' = 'Stuck job rescued by JobRescuer'));`
	reconcileSQLite = `SELECT id, kind, json(args) AS args, state, json_extract(metadata, '$.retry_outcome_unknown') AS unknown_attempts, json(errors) AS errors
FROM river_job
WHERE state IN ('cancelled', 'discarded')
  AND (json_extract(metadata, '$.retry_outcome_unknown') IS NOT NULL
    OR EXISTS (SELECT 1 FROM json_each(errors) WHERE json_extract(value, '$.error') = 'Stuck job rescued by JobRescuer'));`
)

// idsOf wraps a reconciliation query so that it returns the selected jobs'
// IDs, in order.
func idsOf(q string) string {
	return "SELECT id FROM (" + strings.TrimSuffix(q, ";") + ") AS r ORDER BY id"
}

// backends returns SQLite and, when RETRY_POSTGRES_URL is set, PostgreSQL.
func backends(t *testing.T) []backend {
	bs := []backend{sqliteBackend(t)}
	if os.Getenv("RETRY_POSTGRES_URL") != "" {
		bs = append(bs, postgresBackend(t))
	} else {
		t.Log("RETRY_POSTGRES_URL is not set: PostgreSQL part skipped; run `bash .ci/test` from the repository root to run it")
	}
	return bs
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fast sets the River options that make a test quick: short fetch polls (a
// retry due in 50 ms must not wait River's default second), but not so
// short that the package's many clients, polling in parallel, burn the CPU
// they share (polls every 20 ms made the package 3 times slower under the
// race detector on a loaded machine); no startup stagger.
func fast(cfg *river.Config) *river.Config {
	cfg.FetchCooldown = 20 * time.Millisecond
	cfg.FetchPollInterval = 100 * time.Millisecond
	cfg.TestOnly = true
	cfg.Logger = quietLogger()
	return cfg
}

func sqliteBackend(t testing.TB) backend {
	path := filepath.Join(t.TempDir(), "river.sqlite")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1) // River's advice for SQLite: one writer
	t.Cleanup(func() { db.Close() })
	migrator, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: quietLogger()})
	require.NoError(t, err)
	_, err = migrator.Migrate(t.Context(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return backend{
		name: "sqlite",
		client: func(t testing.TB, cfg *river.Config) queue {
			c, err := river.NewClient(riversqlite.New(db), cfg)
			require.NoError(t, err)
			return c
		},
		query:     func(t testing.TB, q string) []int64 { return queryIDs(t, db.QueryContext, idsOf(q)) },
		reconcile: reconcileSQLite,
	}
}

func postgresBackend(t testing.TB) backend {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, os.Getenv("RETRY_POSTGRES_URL"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := newSchema(t, pool)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return backend{
		name: "postgres",
		client: func(t testing.TB, cfg *river.Config) queue {
			cfg.Schema = schema
			c, err := river.NewClient(riverpgxv5.New(pool), cfg)
			require.NoError(t, err)
			return c
		},
		query: func(t testing.TB, q string) []int64 {
			conn, err := pool.Acquire(t.Context())
			require.NoError(t, err)
			defer conn.Release()
			_, err = conn.Exec(t.Context(), "SET search_path TO "+schema)
			require.NoError(t, err)
			defer conn.Exec(context.WithoutCancel(t.Context()), "RESET search_path")
			r, err := conn.Query(t.Context(), idsOf(q))
			require.NoError(t, err)
			defer r.Close()
			var ids []int64
			for r.Next() {
				var id int64
				require.NoError(t, r.Scan(&id))
				ids = append(ids, id)
			}
			require.NoError(t, r.Err())
			return ids
		},
		reconcile: reconcilePostgres,
	}
}

// newSchema creates a schema of the test's own, dropped when it ends.
func newSchema(t testing.TB, pool *pgxpool.Pool) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "retryriver_" + hex.EncodeToString(b[:])
	_, err := pool.Exec(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
	})
	return schema
}

func queryIDs(t testing.TB, query func(context.Context, string, ...any) (*sql.Rows, error), q string) []int64 {
	rows, err := query(t.Context(), q)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// start starts c and stops it when the test ends.
func start(t testing.TB, c queue) {
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
}

// waitFor polls job id until ok holds for it, for at most a minute, and
// returns it.
func waitFor(t testing.TB, c queue, id int64, what string, ok func(*rivertype.JobRow) bool) *rivertype.JobRow {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		job, err := c.JobGet(t.Context(), id)
		require.NoError(t, err)
		if ok(job) {
			return job
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "job never got there", "job %d: not %s after a minute: %+v", id, what, job)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFinal polls job id until it is completed, cancelled or discarded, for
// at most a minute (far more than any test needs on a slow machine).
func waitFinal(t testing.TB, c queue, id int64) *rivertype.JobRow {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		job, err := c.JobGet(t.Context(), id)
		require.NoError(t, err)
		switch job.State {
		case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
			return job
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "job did not finish", "job %d is %s after a minute: %+v", id, job.State, job)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attemptLog records what a worker saw of each attempt.
type attemptLog struct {
	mu   sync.Mutex
	runs []run
}

type run struct {
	attempt     int
	start, end  time.Time
	scheduledAt time.Time
	metadata    []byte
}

func (l *attemptLog) add(r run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, r)
}

func (l *attemptLog) all() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// failArgs is a job whose worker runs its test's func.
type failArgs struct {
	Name string `json:"name"`
}

func (failArgs) Kind() string { return "retryriver_test" }

// funcWorker calls fn for each attempt and logs it.
type funcWorker struct {
	river.WorkerDefaults[failArgs]
	log *attemptLog
	fn  func(ctx context.Context, job *river.Job[failArgs]) error
}

func (w *funcWorker) Work(ctx context.Context, job *river.Job[failArgs]) error {
	r := run{attempt: job.Attempt, start: time.Now(), scheduledAt: job.ScheduledAt, metadata: job.Metadata}
	err := w.fn(ctx, job)
	r.end = time.Now()
	w.log.add(r)
	return err
}

// The queries the tests run are the package documentation's.
func TestDocumentedQueries(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var doc strings.Builder
	for line := range strings.Lines(string(raw)) {
		doc.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t"))
	}
	for _, q := range []string{reconcilePostgres, reconcileSQLite} {
		assert.Contains(t, doc.String(), q)
	}
}
