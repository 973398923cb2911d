package retrypg

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/fleet"
)

// LimiterSchema is the table that the limiters of [NewLimiter] keep their
// schedules in, one row per name, as SQL that a migration can run. A limiter
// creates it with this statement the first time it finds it missing, in the
// first schema of the connection's search_path; run it yourself where the
// connection's role may not create tables. Every column is the server's:
// tat is the end of the schedule and at the time of the last booking, in
// nanoseconds since 1970 on the server's clock, seq the booking counter.
const LimiterSchema = `CREATE TABLE IF NOT EXISTS retry_limiter (
	name text PRIMARY KEY,
	tat bigint NOT NULL,
	at bigint NOT NULL,
	seq bigint NOT NULL
)`

// NewLimiter returns a [retry.Limiter] of r attempts per second with bursts
// of burst, shared by every process that makes one with the same name on
// the same database. opts may be nil: see [fleet.Options] for the defaults
// (each round trip 100ms at most; fail closed when PostgreSQL is slow or
// down) and [fleet.Limiter] for how slots are booked and handed out.
//
// Each booking is one statement, in a transaction of its own, on a
// connection of pool: an INSERT ... ON CONFLICT DO UPDATE of the limit's row
// in the table retry_limiter (see [LimiterSchema]) that reads the server's
// clock_timestamp() once it holds the row's lock, and returns the wait from
// it; so the clocks of the processes never matter, and the row is the
// limit's whole state, committed with the booking: a crash loses nothing
// booked. The table is created on first use, so the limiter works on a
// database that has never seen it; a role that may not create tables needs
// LimiterSchema run once by a migration. Every process must use the same
// rate and burst for a name.
//
// It fails, with an error that names the field, for a nil pool, a name that
// is empty (callers who forgot it would share one limit) or that PostgreSQL
// text cannot hold (a NUL byte, invalid UTF-8), and for what [fleet.New]
// refuses: a rate or burst that admits nothing, or bad options.
func NewLimiter(pool *pgxpool.Pool, name string, r rate.Limit, burst int, opts *fleet.Options) (*fleet.Limiter, error) {
	switch {
	case pool == nil:
		return nil, errors.New("retrypg: NewLimiter: pool is nil")
	case name == "":
		return nil, errors.New("retrypg: NewLimiter: the limit's name is empty: each limit needs a name of its own")
	case strings.IndexByte(name, 0) >= 0 || !utf8.ValidString(name):
		return nil, fmt.Errorf("retrypg: NewLimiter: the limit's name %q is not text PostgreSQL can hold (a NUL byte or invalid UTF-8)", name)
	}
	return fleet.New(&store{pool: pool, name: name}, r, burst, opts)
}

// store is the fleet.Store of one row.
type store struct {
	pool *pgxpool.Pool
	name string
}

// bookSQL books on the row named $1: $2 is after and $3 the slots' span, in
// nanoseconds. The update reads the clock in its sub-select, after the row's
// lock is taken, so that a booking that queued behind another is measured
// from when it is made. The counter of a new row starts at the server's
// time in microseconds. The end of the schedule saturates at the largest
// bigint (the year 2262) instead of overflowing, which only a rate of a few
// slots a century reaches: slots past it share that place.
const bookSQL = `INSERT INTO retry_limiter AS l (name, tat, at, seq)
SELECT $1, least(c.ns + $2::bigint, 9223372036854775807 - $3::bigint) + $3::bigint, c.ns, c.ns / 1000
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint AS ns) c
ON CONFLICT (name) DO UPDATE SET (tat, at, seq) = (
	SELECT least(greatest(l.tat, c.ns + $2::bigint), 9223372036854775807 - $3::bigint) + $3::bigint, c.ns, l.seq + 1
	FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint AS ns) c)
RETURNING tat - $3::bigint - at, seq, at`

const refundSQL = `UPDATE retry_limiter SET tat = tat - $3::bigint WHERE name = $1 AND seq = $2`

func (s *store) Book(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, error) {
	wait, mark, _, err := s.BookClocked(ctx, sc, n, after)
	return wait, mark, err
}

// BookClocked makes the store a fleet.ClockedStore: now is the server's
// clock_timestamp() at the booking, in nanoseconds since 1970.
func (s *store) BookClocked(ctx context.Context, sc fleet.Schedule, n int, after time.Duration) (time.Duration, int64, int64, error) {
	span := spanOf(n, sc.Interval)
	var wait, mark, now int64
	err := s.pool.QueryRow(ctx, bookSQL, s.name, int64(after), span).Scan(&wait, &mark, &now)
	if isUndefinedTable(err) {
		if err = s.create(ctx); err == nil {
			err = s.pool.QueryRow(ctx, bookSQL, s.name, int64(after), span).Scan(&wait, &mark, &now)
		}
	}
	if err != nil {
		return 0, 0, 0, err
	}
	return time.Duration(wait), mark, now, nil
}

// clockSQL reads the clock as bookSQL does.
const clockSQL = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// Now makes the store a fleet.ClockedStore: the server's clock_timestamp(),
// in nanoseconds since 1970, without booking.
func (s *store) Now(ctx context.Context) (int64, error) {
	var now int64
	err := s.pool.QueryRow(ctx, clockSQL).Scan(&now)
	return now, err
}

func (s *store) Refund(ctx context.Context, sc fleet.Schedule, mark int64, n int) (bool, error) {
	tag, err := s.pool.Exec(ctx, refundSQL, s.name, mark, spanOf(n, sc.Interval))
	return err == nil && tag.RowsAffected() == 1, err
}

// spanOf returns n intervals in nanoseconds, at most math.MaxInt64.
func spanOf(n int, interval time.Duration) int64 {
	if n <= 0 || interval <= 0 {
		return 0
	}
	if int64(interval) > math.MaxInt64/int64(n) {
		return math.MaxInt64
	}
	return int64(n) * int64(interval)
}

func (s *store) create(ctx context.Context) error {
	return createTable(ctx, s.pool, LimiterSchema)
}

// createTable creates a table by its CREATE TABLE IF NOT EXISTS. Processes
// that create it at the same time can make all but one fail with a unique
// violation on the catalog (PostgreSQL's IF NOT EXISTS checks before it
// inserts), or with "type ... already exists" (42710, the table's row
// type), which means it now exists.
func createTable(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, schema)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07" || pe.Code == "42710") {
		return nil
	}
	return err
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
