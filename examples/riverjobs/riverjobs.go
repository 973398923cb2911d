// Package riverjobs runs River jobs (github.com/riverqueue/river) under a
// retry.Policy on SQLite, from an empty file: the database is created and
// migrated, the client is configured in one line with retryriver, and a
// job whose worker fails twice with a transient error is retried at the
// times the policy gives, stored in the queue, until it succeeds.
//
// SQLite is River's riversqlite driver over modernc.org/sqlite, a SQLite
// written in Go, so nothing but Go is needed. River's advice for SQLite is
// one open connection, since SQLite has one writer.
package riverjobs

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Open opens (creating it if need be) the SQLite database at path and
// brings River's tables up to date. logger receives the migration's log;
// nil means slog's default logger.
func Open(ctx context.Context, path string, logger *slog.Logger) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	migrator, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: logger})
	if err == nil {
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	return db, nil
}
