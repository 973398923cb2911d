// Package download retries a download with retry.DoValue, done right: the
// response's body is read to its end inside the retried function.
//
// A download can fail after its response has arrived: the connection is
// reset, or closed before the body's last byte (io.ErrUnexpectedEOF).
// Reading the body inside the function makes such a failure an attempt's
// error, which the loop retries like any other; a function that returned the
// *http.Response and left its body to the caller would leave that failure
// outside the loop, where nothing retries it.
//
// And it would not work at all with Policy.AttemptTimeout: each attempt
// then has a context of its own, which ends when the function returns, so
// the body of a response returned from it can no longer be read (the read
// fails with context.Canceled). Read inside, the attempt's timeout bounds
// the whole download, a stalled body included, instead of cutting it.
//
// retryhttp is the other way to retry a GET, when the caller wants the
// response and its body as a stream: its Transport retries until the
// response headers arrive, and never cuts the body it hands back. It does not
// retry a body cut midway: that is what reading inside DoValue is for.
package download

import (
	"context"
	"io"
	"net/http"
	"os"

	"github.com/seed93a044d1/retry"
)

// Fetch returns the body of a GET of url, read whole, retried under policy.
// A cut body is retried from the start.
func Fetch(ctx context.Context, client *http.Client, url string, policy retry.Policy) ([]byte, error) {
	return retry.DoValue(ctx, func(ctx context.Context) ([]byte, error) {
		resp, err := get(ctx, client, url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}, policy)
}

// ToFile writes the body of a GET of url to the file at path, for a body too
// large to hold in memory, and returns its size. Each attempt starts the file
// again, so that a cut attempt leaves nothing behind in it.
func ToFile(ctx context.Context, client *http.Client, url, path string, policy retry.Policy) (int64, error) {
	return retry.DoValue(ctx, func(ctx context.Context) (int64, error) {
		resp, err := get(ctx, client, url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		f, err := os.Create(path) // truncates what an earlier attempt wrote
		if err != nil {
			return 0, retry.Permanent(err)
		}
		n, err := io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = retry.Permanent(cerr)
		}
		return n, err
	}, policy)
}

// get sends a GET whose answer is an error unless its status is 1xx to 3xx:
// retry.CheckResponse turns a 503 into an error the loop retries, with the
// server's Retry-After.
func get(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, retry.Permanent(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if err := retry.CheckResponse(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}
