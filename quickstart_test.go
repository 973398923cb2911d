package retry_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// User and userAPI stand for a dependency in the README's quick start.
type User struct{ Name string }

type userAPI struct{ calls int }

// User fails its first call with a connection reset, then answers.
func (a *userAPI) User(_ context.Context, id string) (User, error) {
	if a.calls++; a.calls == 1 {
		return User{}, syscall.ECONNRESET
	}
	return User{Name: id}, nil
}

// The README's quick start is this test's code between the markers, and it
// runs: a newcomer copies code that compiles and does what it says.
func TestREADMEQuickStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, api, id := t.Context(), &userAPI{}, "ada"
		// README quick start begins
		// One policy per dependency, shared by every call: at most 5 attempts,
		// waits from 200ms doubling to 5s, full jitter.
		var apiPolicy = retry.Policy{
			MaxAttempts: 5,
			Backoff:     retry.Exponential{Base: 200 * time.Millisecond, Cap: 5 * time.Second},
			Budget:      retry.NewBudget(0.1, 10),                    // retries: ~10% of calls + 10/s
			Limiter:     retry.RateLimiter(rate.NewLimiter(200, 20)), // every attempt, retries too
		}

		// Any call: retried while its error may pass, never past ctx's deadline.
		user, err := retry.DoValue(ctx, func(ctx context.Context) (User, error) {
			return api.User(ctx, id)
		}, apiPolicy)

		// An HTTP client: idempotent requests retried, Retry-After honoured.
		client := retryhttp.NewClient(&http.Client{Timeout: 10 * time.Second}, apiPolicy)
		// README quick start ends
		require.NoError(t, err)
		assert.Equal(t, User{Name: "ada"}, user)
		assert.Equal(t, 2, api.calls, "the reset was retried")
		tr, ok := client.Transport.(*retryhttp.Transport)
		require.True(t, ok, "the client sends through retryhttp")
		assert.Equal(t, 5, tr.Policy.MaxAttempts)
		assert.Equal(t, 10*time.Second, tr.Timeout, "the client's Timeout bounds the whole call, retries included")
	})

	src, err := os.ReadFile("quickstart_test.go")
	require.NoError(t, err)
	_, code, ok := strings.Cut(string(src), "// README quick start begins\n")
	require.True(t, ok)
	code, _, ok = strings.Cut(code, "\t\t// README quick start ends")
	require.True(t, ok)
	code = strings.ReplaceAll("\n"+code, "\n\t\t", "\n")[1:]
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "```go\n"+code+"```\n"),
		"the README's quick start is not this test's code; it should be:\n%s", code)
}
