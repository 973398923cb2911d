package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's PostgreSQL program runs, in a database of its own: River's
// tables are created, the job fails once and is retried, and a second run
// finds the tables in place.
func TestProgram(t *testing.T) {
	t.Parallel()
	admin := os.Getenv("RETRY_POSTGRES_URL")
	if admin == "" {
		t.Skip("RETRY_POSTGRES_URL is not set: run `bash .ci/test` from the repository root, which starts a throwaway PostgreSQL")
	}
	pool, err := pgxpool.New(t.Context(), admin)
	require.NoError(t, err)
	defer pool.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "retryriver_example_" + hex.EncodeToString(b[:])
	_, err = pool.Exec(t.Context(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	defer func() {
		_, err := pool.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		assert.NoError(t, err)
	}()
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name

	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		var out bytes.Buffer
		err := run(ctx, u.String(), &out)
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "attempt 1 failed (retry: HTTP 503 Service Unavailable): retried\nattempt 2: completed\n", out.String())
	}
}
