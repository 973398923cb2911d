package retryhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// A server that is busy twice, then answers. The client retries the GET and
// returns the response that succeeded; the busy ones were drained and closed.
func ExampleNewClient() {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "hello")
	}))
	defer srv.Close()

	// The one line that turns retries on. The example waits 0 between
	// attempts so that it runs at once; the default backoff starts at 100ms.
	client := retryhttp.NewClient(srv.Client(), retry.Policy{Backoff: retry.Constant(0)})

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Print(string(body))
	fmt.Println("requests:", requests.Load())
	// Output:
	// 200 OK
	// hello
	// requests: 3
}

// POST is not retried by default. Here one endpoint known to be idempotent
// is opted in, and each retry says which attempt it is; a POST elsewhere is
// still sent once, and its 503 comes back as it is. Transport.Client builds
// the client with every setting of the Transport, where NewClient takes only
// the policy.
func ExampleTransport_Client() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("server: %s %s %q attempt=%q\n", r.Method, r.URL.Path, body, r.Header.Get("Retry-Attempt"))
		if r.Header.Get("Retry-Attempt") != "3" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "found")
	}))
	defer srv.Close()

	client := (&retryhttp.Transport{
		Policy: retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)},
		Retryable: func(r *http.Request) bool {
			return retryhttp.DefaultRetryable(r) || (r.Method == http.MethodPost && r.URL.Path == "/search")
		},
		AttemptHeader: "Retry-Attempt",
	}).Client(srv.Client())

	for _, path := range []string{"/search", "/orders"} {
		// A strings.Reader body can be replayed: http.NewRequest sets GetBody.
		resp, err := client.Post(srv.URL+path, "text/plain", strings.NewReader("q=go"))
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("client: %s %s %q\n", path, resp.Status, strings.TrimSpace(string(body)))
	}
	// Output:
	// server: POST /search "q=go" attempt=""
	// server: POST /search "q=go" attempt="2"
	// server: POST /search "q=go" attempt="3"
	// client: /search 200 OK "found"
	// server: POST /orders "q=go" attempt=""
	// client: /orders 503 Service Unavailable "busy"
}
