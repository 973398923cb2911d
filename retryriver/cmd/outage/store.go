package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

// store is the drill's River database as the drill's coordinator sees it: a
// SQLite file, or a schema of its own in a PostgreSQL database. Workers,
// possibly in other processes, open it again from dsn and schema.
type store struct {
	postgres bool
	dsn      string // SQLite file path, or the PostgreSQL URL
	schema   string // PostgreSQL only
	db       *sql.DB
	pool     *pgxpool.Pool // PostgreSQL only
	cleanup  func()
}

func (s *store) name() string {
	if s.postgres {
		return "postgres"
	}
	return "sqlite"
}

// table is river_job, qualified by the schema when there is one.
func (s *store) table() string {
	if s.postgres {
		return s.schema + ".river_job"
	}
	return "river_job"
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sqliteDB opens a SQLite file the way River wants it: one connection (one
// writer), WAL so that other processes can read while it writes, and a busy
// timeout for when they write at once.
func sqliteDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(30000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// openStore makes a fresh River database: a SQLite file in a new temporary
// folder when url is empty, else a new schema in the PostgreSQL database at
// url. Both are migrated. Unless keep, cleanup removes them.
func openStore(ctx context.Context, url string, keep bool) (*store, error) {
	if url == "" {
		dir, err := os.MkdirTemp("", "retryriver-outage-")
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "river.sqlite")
		db, err := sqliteDB(path)
		if err != nil {
			return nil, err
		}
		s := &store{dsn: path, db: db, cleanup: func() {
			db.Close()
			if !keep {
				os.RemoveAll(dir)
			}
		}}
		m, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: quiet()})
		if err == nil {
			_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		}
		if err != nil {
			s.cleanup()
			return nil, fmt.Errorf("outage: migrating %s: %w", path, err)
		}
		return s, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "retryriver_outage_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("outage: creating schema: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	s := &store{postgres: true, dsn: url, schema: schema, db: db, pool: pool, cleanup: func() {
		db.Close()
		if !keep {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		}
		pool.Close()
	}}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet()})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("outage: migrating schema %s: %w", schema, err)
	}
	return s, nil
}

// insert queues n notification jobs; each derives its idempotency key from
// its own row when it runs.
func (s *store) insert(ctx context.Context, n, maxAttempts int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: notifyArgs{N: i}, InsertOpts: &river.InsertOpts{MaxAttempts: maxAttempts}}
	}
	const batch = 1000
	for len(params) > 0 {
		k := min(batch, len(params))
		var err error
		if s.postgres {
			var c *river.Client[pgxTx]
			c, err = river.NewClient(riverpgxv5.New(s.pool), &river.Config{Schema: s.schema, Logger: quiet()})
			if err == nil {
				_, err = c.InsertMany(ctx, params[:k])
			}
		} else {
			var c *river.Client[*sql.Tx]
			c, err = river.NewClient(riversqlite.New(s.db), &river.Config{Logger: quiet()})
			if err == nil {
				_, err = c.InsertMany(ctx, params[:k])
			}
		}
		if err != nil {
			return fmt.Errorf("outage: inserting jobs: %w", err)
		}
		params = params[k:]
	}
	return nil
}

// counts is the state of the jobs at one moment.
type counts struct {
	completed, discarded, cancelled, other int
	attempts                               int // the sum of every job's attempt number
	running                                int
}

func (c counts) final() int { return c.completed + c.discarded + c.cancelled }

// reconcileQuery is the package documentation's query (without its
// trailing semicolon): the jobs that stopped after an attempt whose outcome
// is unknown.
func (s *store) reconcileQuery() string {
	if s.postgres {
		return `SELECT id, kind, args, state, metadata->'retry_outcome_unknown' AS unknown_attempts, errors
FROM river_job
WHERE state IN ('cancelled', 'discarded')
  AND (metadata ? 'retry_outcome_unknown'
    OR EXISTS (SELECT 1 FROM unnest(errors) AS e WHERE e->>'error' = 'Stuck job rescued by JobRescuer'))`
	}
	return `SELECT id, kind, json(args) AS args, state, json_extract(metadata, '$.retry_outcome_unknown') AS unknown_attempts, json(errors) AS errors
FROM river_job
WHERE state IN ('cancelled', 'discarded')
  AND (json_extract(metadata, '$.retry_outcome_unknown') IS NOT NULL
    OR EXISTS (SELECT 1 FROM json_each(errors) WHERE json_extract(value, '$.error') = 'Stuck job rescued by JobRescuer'))`
}

func (s *store) counts(ctx context.Context) (counts, error) {
	var c counts
	rows, err := s.db.QueryContext(ctx, "SELECT state, count(*), coalesce(sum(attempt), 0) FROM "+s.table()+" GROUP BY state")
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n, attempts int
		if err := rows.Scan(&state, &n, &attempts); err != nil {
			return c, err
		}
		c.attempts += attempts
		switch state {
		case "completed":
			c.completed = n
		case "discarded":
			c.discarded = n
		case "cancelled":
			c.cancelled = n
		case "running":
			c.running = n
			c.other += n
		default:
			c.other += n
		}
	}
	return c, rows.Err()
}

// outcome is one job at the end of the drill.
type outcome struct {
	id        int64
	key       string // its notification's idempotency key
	state     string
	unknown   int  // its attempts marked outcome-unknown
	reconcile bool // the reconciliation query selects it
}

// outcomes reads every job, once the drill is over.
func (s *store) outcomes(ctx context.Context) ([]outcome, error) {
	q := "SELECT id, coalesce(metadata->>'" + metadataKey + "', ''), state, coalesce(jsonb_array_length(metadata->'retry_outcome_unknown'), 0) FROM " + s.table() + " ORDER BY id"
	if !s.postgres {
		q = "SELECT id, coalesce(json_extract(metadata, '$." + metadataKey + "'), ''), state, coalesce(json_array_length(metadata, '$.retry_outcome_unknown'), 0) FROM river_job ORDER BY id"
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outcome
	at := map[int64]int{}
	for rows.Next() {
		var o outcome
		if err := rows.Scan(&o.id, &o.key, &o.state, &o.unknown); err != nil {
			return nil, err
		}
		at[o.id] = len(out)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	reconcile, err := s.ids(ctx, "SELECT id FROM ("+strings.Replace(s.reconcileQuery(), "river_job", s.table(), 1)+") AS r")
	if err != nil {
		return nil, err
	}
	for _, id := range reconcile {
		if i, ok := at[id]; ok {
			out[i].reconcile = true
		}
	}
	return out, nil
}

// running returns the IDs of the jobs in state running.
func (s *store) running(ctx context.Context) ([]int64, error) {
	return s.ids(ctx, "SELECT id FROM "+s.table()+" WHERE state = 'running' ORDER BY id")
}

func (s *store) ids(ctx context.Context, q string) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
