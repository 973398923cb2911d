package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's SQLite program runs: River's tables are created, the job
// fails once and is retried, and a second run on the same file finds the
// tables in place.
func TestProgram(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.sqlite")
	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		var out bytes.Buffer
		err := run(ctx, path, &out)
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "attempt 1 failed (retry: HTTP 503 Service Unavailable): retried\nattempt 2: completed\n", out.String())
	}
}
