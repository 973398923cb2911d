package retrypg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed93a044d1/retry/fleet"
)

// ConcurrencySchema is the table that the limits of [NewConcurrency] keep
// their leases in, one row per slot held, as SQL that a migration can run.
// A limit creates it with this statement the first time it finds it
// missing, in the first schema of the connection's search_path; run it
// yourself where the connection's role may not create tables. expires_at
// is on the server's clock.
const ConcurrencySchema = `CREATE TABLE IF NOT EXISTS retry_slots (
	name text NOT NULL,
	id text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, id)
)`

// NewConcurrency returns a [retry.Concurrency] of limit attempts in flight
// at once, shared by every process that makes one with the same name on
// the same database; each slot is a lease of lease, renewed while its
// attempt runs, so that the slots of a process that dies come back to the
// fleet a lease after its last renewal at most. opts may be nil: see
// [fleet.Options] for the defaults (each round trip 100ms at most; fail
// closed when PostgreSQL is slow or down) and [fleet.Concurrency] for how
// slots are leased, renewed and waited for.
//
// Each slot is a row of the table retry_slots (see [ConcurrencySchema]).
// A lease is one round trip, a pipeline of statements in one transaction
// at READ COMMITTED, whatever the session's default: it takes a
// transaction-level advisory lock on the name (from hashtextextended of
// "retry_slots " and the name), which orders the leases of one limit, then
// deletes the name's expired rows and inserts its own if fewer than limit
// remain, each statement reading the server's clock_timestamp() once the
// lock is held; so the clocks of the processes never matter. A renewal is
// one UPDATE for all the process's leases, a release one DELETE. The table
// is created on first use. Every process must use the same limit and lease
// for a name.
//
// It fails, with an error that names the field, for a nil pool, a name that
// is empty (callers who forgot it would share one limit) or that PostgreSQL
// text cannot hold (a NUL byte, invalid UTF-8), and for what
// [fleet.NewConcurrency] refuses: a limit below 1, a lease below 1ms, or
// bad options.
func NewConcurrency(pool *pgxpool.Pool, name string, limit int, lease time.Duration, opts *fleet.Options) (*fleet.Concurrency, error) {
	switch {
	case pool == nil:
		return nil, errors.New("retrypg: NewConcurrency: pool is nil")
	case name == "":
		return nil, errors.New("retrypg: NewConcurrency: the limit's name is empty: each limit needs a name of its own")
	case strings.IndexByte(name, 0) >= 0 || !utf8.ValidString(name):
		return nil, fmt.Errorf("retrypg: NewConcurrency: the limit's name %q is not text PostgreSQL can hold (a NUL byte or invalid UTF-8)", name)
	}
	return fleet.NewConcurrency(&slots{pool: pool, name: name}, limit, lease, opts)
}

// slots is the fleet.SlotStore of one name's rows.
type slots struct {
	pool *pgxpool.Pool
	name string
}

// The statements of a lease, sent together. The lock is taken by a
// statement of its own, before those that read the table: at READ
// COMMITTED each statement sees what was committed when it began, so the
// count sees every lease committed by those that held the lock before.
const (
	leaseBegin  = `BEGIN ISOLATION LEVEL READ COMMITTED`
	leaseLock   = `SELECT pg_advisory_xact_lock(hashtextextended('retry_slots ' || $1::text, 0))`
	leaseTrim   = `DELETE FROM retry_slots WHERE name = $1 AND expires_at <= clock_timestamp()`
	leaseInsert = `INSERT INTO retry_slots (name, id, expires_at)
SELECT $1, $2, clock_timestamp() + $4::float8 * interval '1 second'
WHERE (SELECT count(*) FROM retry_slots WHERE name = $1) < $3`
	leaseCommit = `COMMIT`

	renewSQL = `UPDATE retry_slots SET expires_at = clock_timestamp() + $3::float8 * interval '1 second'
WHERE name = $1 AND id = ANY($2) RETURNING id`
	releaseSQL = `DELETE FROM retry_slots WHERE name = $1 AND id = $2`
)

func (s *slots) Lease(ctx context.Context, id string, limit int, lease time.Duration) (bool, error) {
	ok, err := s.lease(ctx, id, limit, lease)
	if isUndefinedTable(err) {
		if err = s.create(ctx); err == nil {
			ok, err = s.lease(ctx, id, limit, lease)
		}
	}
	return ok, err
}

func (s *slots) lease(ctx context.Context, id string, limit int, lease time.Duration) (bool, error) {
	b := &pgx.Batch{}
	b.Queue(leaseBegin)
	b.Queue(leaseLock, s.name)
	b.Queue(leaseTrim, s.name)
	b.Queue(leaseInsert, s.name, id, limit, lease.Seconds())
	b.Queue(leaseCommit)
	br := s.pool.SendBatch(ctx, b)
	var added int64
	for i := range b.Len() {
		tag, err := br.Exec()
		if err != nil {
			// The transaction is left open and failed on its connection,
			// which the pool then closes.
			_ = br.Close()
			return false, err
		}
		if i == 3 {
			added = tag.RowsAffected()
		}
	}
	return added == 1, br.Close()
}

func (s *slots) Renew(ctx context.Context, ids []string, lease time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, renewSQL, s.name, ids, lease.Seconds())
	if err != nil {
		if isUndefinedTable(err) {
			return ids, nil // no table, no lease
		}
		return nil, err
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if isUndefinedTable(err) {
		return ids, nil
	}
	if err != nil {
		return nil, err
	}
	kept := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		kept[id] = true
	}
	var lost []string
	for _, id := range ids {
		if !kept[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

func (s *slots) Release(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, releaseSQL, s.name, id)
	if isUndefinedTable(err) {
		return nil
	}
	return err
}

func (s *slots) create(ctx context.Context) error {
	return createTable(ctx, s.pool, ConcurrencySchema)
}
