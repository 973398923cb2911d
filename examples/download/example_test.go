package download_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/download"
)

// file is what the server serves: 1 MiB.
var file = bytes.Repeat([]byte("0123456789abcdef"), 1<<16)

// server serves file, but cuts the connection halfway through the body of
// its first cut responses.
func server(cut int32) (*httptest.Server, *atomic.Int32) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		if requests.Add(1) <= cut {
			w.Write(file[:len(file)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // closes the connection
		}
		w.Write(file)
	}))
	return srv, &requests
}

// The first response's body is cut halfway: reading it inside the retried
// function makes that an attempt's error, and the second attempt gets it
// all.
func ExampleFetch() {
	srv, requests := server(1)
	defer srv.Close()
	policy := retry.Policy{Backoff: retry.Constant(0), AttemptTimeout: time.Minute}
	body, err := download.Fetch(context.Background(), srv.Client(), srv.URL, policy)
	fmt.Println(len(body), "bytes, intact:", bytes.Equal(body, file), err, "after", requests.Load(), "requests")
	// Output:
	// 1048576 bytes, intact: true <nil> after 2 requests
}

// The same into a file, written again from the start by each attempt.
func ExampleToFile() {
	srv, requests := server(2)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "download")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "file")
	n, err := download.ToFile(context.Background(), srv.Client(), srv.URL, path, retry.Policy{Backoff: retry.Constant(0)})
	written, _ := os.ReadFile(path)
	fmt.Println(n, "bytes, intact:", bytes.Equal(written, file), err, "after", requests.Load(), "requests")
	// Output:
	// 1048576 bytes, intact: true <nil> after 3 requests
}

// What not to do: return the response and read its body after DoValue has
// returned. With an AttemptTimeout the attempt's context ended when the
// function returned, and the body cannot be read any more.
func Example_bodyReadTooLate() {
	// A server that sends half the body at once and the rest only after a
	// pause, as a large file over a slow link would: the rest never comes.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		w.Write(file[:len(file)/2])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done(): // the client's cancellation closed the connection
		case <-time.After(time.Minute):
			w.Write(file[len(file)/2:])
		}
	}))
	defer srv.Close()
	resp, err := retry.DoValue(context.Background(), func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return nil, retry.Permanent(err)
		}
		return srv.Client().Do(req)
	}, retry.Policy{AttemptTimeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	fmt.Println(resp.Status, "then reading the body:", err)
	// Output:
	// 200 OK then reading the body: context canceled
}
