package retryriver_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's complete programs are the ones the examples' tests build and
// run, word for word, and its reconciliation queries are the ones the tests
// run.
func TestREADME(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme := string(raw)
	for _, path := range []string{"examples/sqlite/main.go", "examples/postgres/main.go"} {
		program, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, strings.Contains(readme, "```go\n"+string(program)+"```\n"), "README.md does not hold %s as it is", path)
	}
	for _, q := range []string{reconcilePostgres, reconcileSQLite} {
		assert.Contains(t, readme, q)
	}
}
