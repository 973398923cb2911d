package retrypg_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed93a044d1/retry/retrypg"
	"github.com/seed93a044d1/retry/retrysql"
)

// One transaction on loopback PostgreSQL (BEGIN, one UPDATE, COMMIT: three
// round trips), first try, one goroutine: pgx.BeginTxFunc against
// retrypg.Tx on a pgxpool, and a bare database/sql transaction against
// retrysql.Tx on pgx's stdlib driver. The difference in each pair is what
// the helper costs on a first-try success.
func BenchmarkTx(b *testing.B) {
	d := newDatabase(b)
	d.exec(`CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO counter VALUES (1, 0)`)
	const update = `UPDATE counter SET n = n + 1 WHERE id = 1`
	ctx := context.Background()
	pool := d.pool("", 1)
	db := d.sqlDB("")
	db.SetMaxOpenConns(1)

	b.Run("pgx.BeginTxFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrypg.Tx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := retrypg.Tx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("database/sql", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, update); err != nil {
				_ = tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrysql.Tx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := retrysql.Tx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, update)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The same pairs, interleaved: each iteration runs one transaction each
// way, in alternating order, and times each, so that both see the same
// load; on a shared machine whose speed drifts, this measures the
// difference better than two benchmarks run one after the other. It reports
// the median time of each (a stall of the machine lengthens a few
// transactions by milliseconds, which would swamp a mean) and the helper's
// overhead in percent of the bare transaction's median.
func BenchmarkTxInterleaved(b *testing.B) {
	d := newDatabase(b)
	d.exec(`CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO counter VALUES (1, 0)`)
	const update = `UPDATE counter SET n = n + 1 WHERE id = 1`
	ctx := context.Background()
	pool := d.pool("", 1)
	db := d.sqlDB("")
	db.SetMaxOpenConns(1)

	pgxWork := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		return err
	}
	sqlWork := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, update)
		return err
	}
	pairs := []struct {
		name         string
		bare, helper func() error
	}{
		{"pgx",
			func() error { return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, pgxWork) },
			func() error {
				return retrypg.Tx(ctx, pool, func(_ context.Context, tx pgx.Tx) error { return pgxWork(tx) })
			}},
		{"database/sql",
			func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := sqlWork(ctx, tx); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			func() error { return retrysql.Tx(ctx, db, sqlWork) }},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			var bare, helper []time.Duration
			timed := func(f func() error, into *[]time.Duration) {
				start := time.Now()
				if err := f(); err != nil {
					b.Fatal(err)
				}
				*into = append(*into, time.Since(start))
			}
			n := 0
			for b.Loop() {
				if n%2 == 0 {
					timed(p.bare, &bare)
					timed(p.helper, &helper)
				} else {
					timed(p.helper, &helper)
					timed(p.bare, &bare)
				}
				n++
			}
			mb, mh := median(bare), median(helper)
			b.ReportMetric(float64(mb.Nanoseconds()), "bare-ns/tx")
			b.ReportMetric(float64(mh.Nanoseconds()), "helper-ns/tx")
			b.ReportMetric(100*(float64(mh)-float64(mb))/float64(mb), "overhead-%")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
