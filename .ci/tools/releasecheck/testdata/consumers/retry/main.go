// Command retry uses the root module as a user installs it: retry.Do, and
// retryhttp against a loopback server that fails twice before it answers.
package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

func main() {
	policy := retry.Policy{Backoff: retry.Constant(0)}
	attempts := 0
	err := retry.Do(context.Background(), func(context.Context) error {
		if attempts++; attempts < 3 {
			return syscall.ECONNRESET
		}
		return nil
	}, policy)
	if err != nil || attempts != 3 {
		fail("retry.Do: %d attempts, %v; want 3, <nil>", attempts, err)
	}

	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	resp, err := retryhttp.NewClient(srv.Client(), policy).Get(srv.URL)
	if err != nil {
		fail("retryhttp: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || served.Load() != 3 {
		fail("retryhttp: status %d after %d requests; want 200 after 3", resp.StatusCode, served.Load())
	}
	fmt.Println("retry.Do: 3 attempts; retryhttp: 200 after 2 responses of 503")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
