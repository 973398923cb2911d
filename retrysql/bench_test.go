package retrysql_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retrysql"
)

// The cost of Tx itself, on a first-try success: one transaction (BEGIN, one
// statement, COMMIT) on the in-memory bank driver, bare and through Tx. The
// difference is Tx's own work; the retrypg module's benchmarks set it against
// a transaction on loopback PostgreSQL.
func BenchmarkTx(b *testing.B) {
	ctx := context.Background()
	work := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "add", "alice", int64(1))
		return err
	}
	b.Run("database/sql", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := work(ctx, tx); err != nil {
				_ = tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrysql.Tx", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := retrysql.Tx(ctx, db, work); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrysql.Tx/options", func(b *testing.B) {
		db := sql.OpenDB(newBank(nil))
		defer db.Close()
		b.ReportAllocs()
		p := retry.Policy{MaxAttempts: 5}
		check := func(context.Context) (bool, error) { return false, nil }
		for b.Loop() {
			err := retrysql.Tx(ctx, db, work, retrysql.WithPolicy(p),
				retrysql.WithTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}), retrysql.WithCommitCheck(check))
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The same pair, interleaved: each iteration runs one transaction each way,
// in alternating order, and times each, so that both see the same load on a
// shared machine. It reports the median of each and their difference, Tx's
// own cost on a first-try success.
func BenchmarkTxInterleaved(b *testing.B) {
	ctx := context.Background()
	db := sql.OpenDB(newBank(nil))
	defer db.Close()
	work := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "add", "alice", int64(1))
		return err
	}
	bare := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := work(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	helper := func() error { return retrysql.Tx(ctx, db, work) }
	var bareTimes, helperTimes []time.Duration
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
			timed(bare, &bareTimes)
			timed(helper, &helperTimes)
		} else {
			timed(helper, &helperTimes)
			timed(bare, &bareTimes)
		}
		n++
	}
	mb, mh := median(bareTimes), median(helperTimes)
	b.ReportMetric(float64(mb.Nanoseconds()), "bare-ns/tx")
	b.ReportMetric(float64(mh.Nanoseconds()), "helper-ns/tx")
	b.ReportMetric(float64((mh - mb).Nanoseconds()), "tx-cost-ns")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
