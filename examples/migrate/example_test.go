package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// schedule returns the waits before the first n retries of b, with no
// jitter drawn (u = 0 is no wait with full jitter, so the backoffs here say
// NoJitter).
func schedule(b retry.Backoff, n int) string {
	waits := make([]string, n)
	var prev time.Duration
	for i := range waits {
		prev = b.Delay(i+1, prev, 0)
		waits[i] = prev.String()
	}
	return strings.Join(waits, " ")
}

// busy is a loopback server that answers 503 to its first fails requests of
// each method, then 200, and counts what it was sent.
type busy struct {
	*httptest.Server
	fails    int32
	requests atomic.Int32
}

func newBusy(fails int32) *busy {
	b := &busy{fails: fails}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.requests.Add(1) <= b.fails {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	return b
}

// hashicorp/go-retryablehttp:
//
//	client := retryablehttp.NewClient()
//	client.RetryMax = 4                       // retries: 5 attempts in all
//	client.RetryWaitMin = time.Second
//	client.RetryWaitMax = 30 * time.Second
//	std := client.StandardClient()
func Example_goRetryablehttp() {
	policy := retry.Policy{
		MaxAttempts: 5, // RetryMax 4 counts retries; MaxAttempts counts the first attempt too
		// Backoff: retry.Exponential{Base: time.Second, Cap: 30 * time.Second, Jitter: retry.NoJitter},
		Backoff: retry.Constant(time.Nanosecond), // here, so that the example runs at once
	}
	client := retryhttp.NewClient(&http.Client{Timeout: 10 * time.Second}, policy)

	// Two 503s, then 200: the same as go-retryablehttp.
	srv := newBusy(2)
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("GET:", resp.StatusCode, "after", srv.requests.Load(), "requests")
	srv.Close()

	// Always 503: go-retryablehttp returns a nil response and an error
	// ("giving up after 5 attempt(s)"); retryhttp returns the last response
	// and a nil error, as an http.RoundTripper must. retry.CheckResponse
	// turns it into an error when you want one.
	srv = newBusy(100)
	resp, err = client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("GET:", resp.StatusCode, "after", srv.requests.Load(), "requests; error:", err)
	fmt.Println("as an error:", retry.CheckResponse(resp))
	srv.Close()

	// go-retryablehttp retries a POST; retryhttp does not, unless it
	// carries an Idempotency-Key, or Retryable says POST is safe.
	srv = newBusy(1)
	resp, err = client.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("POST:", resp.StatusCode, "after", srv.requests.Load(), "request")
	srv.Close()

	keyed := (&retryhttp.Transport{Policy: policy, IdempotencyKey: retryhttp.NewKey}).Client(nil)
	srv = newBusy(1)
	resp, err = keyed.Post(srv.URL, "text/plain", strings.NewReader("charge"))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("POST with a key:", resp.StatusCode, "after", srv.requests.Load(), "requests")
	srv.Close()
	// Output:
	// GET: 200 after 3 requests
	// GET: 503 after 5 requests; error: <nil>
	// as an error: retry: HTTP 503 Service Unavailable
	// POST: 503 after 1 request
	// POST with a key: 200 after 2 requests
}

// cenkalti/backoff v5:
//
//	b := backoff.NewExponentialBackOff() // 500ms, x1.5, up to 60s, ±50%
//	user, err := backoff.Retry(ctx, op,
//		backoff.WithBackOff(b),
//		backoff.WithMaxTries(5),                 // all attempts, as MaxAttempts
//		backoff.WithMaxElapsedTime(time.Minute), // a deadline on ctx instead
//		backoff.WithNotify(func(err error, d time.Duration) { log.Println(err, d) }))
func Example_cenkaltiBackoff() {
	// One value for every call and goroutine: a Backoff has no state to Reset.
	b := retry.Exponential{Base: 500 * time.Millisecond, Multiplier: 1.5, Cap: time.Minute, Jitter: retry.NoJitter}
	fmt.Println(schedule(b, 4)) // the waits before jitter

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // WithMaxElapsedTime
	defer cancel()
	policy := retry.Policy{
		MaxAttempts: 5,
		Backoff:     retry.Constant(time.Nanosecond), // b, with its jitter, in real code
		Observe: func(_ context.Context, e retry.Event) { // WithNotify
			if e.Retry {
				fmt.Println("notify:", e.Err)
			}
		},
	}
	calls := 0
	user, err := retry.DoValue(ctx, func(context.Context) (string, error) {
		if calls++; calls == 1 {
			return "", syscall.ECONNRESET
		}
		return "ada", nil
	}, policy)
	fmt.Println(user, err)

	// backoff.Permanent(err) is retry.Permanent(err): no retry.
	_, err = retry.DoValue(ctx, func(context.Context) (string, error) {
		return "", retry.Permanent(errors.New("no such user"))
	}, policy)
	var re *retry.Error
	errors.As(err, &re)
	fmt.Println(re.Attempts, "attempt:", err)
	// Output:
	// 500ms 750ms 1.125s 1.6875s
	// notify: connection reset by peer
	// ada <nil>
	// 1 attempt: retry: gave up after 1 attempt (error not retryable): no such user
}

// avast/retry-go v4:
//
//	user, err := retry.DoWithData(op,
//		retry.Attempts(3),                     // all attempts, as MaxAttempts
//		retry.Delay(100*time.Millisecond),
//		retry.MaxDelay(2*time.Second),
//		retry.DelayType(retry.BackOffDelay),
//		retry.RetryIf(func(err error) bool { return !errors.Is(err, errNotFound) }),
//		retry.OnRetry(func(n uint, err error) { log.Printf("#%d: %s", n, err) }),
//		retry.Context(ctx))
func Example_avastRetryGo() {
	b := retry.Exponential{Base: 100 * time.Millisecond, Cap: 2 * time.Second, Jitter: retry.NoJitter}
	fmt.Println(schedule(b, 6))

	errNotFound := errors.New("not found")
	policy := retry.Policy{
		MaxAttempts: 3,
		Backoff:     retry.Constant(time.Nanosecond), // b in real code
		// RetryIf: a Classifier says Stop where RetryIf said false, and
		// leaves the rest to the default rules.
		Classifier: retry.Classifiers(func(err error) retry.Decision {
			if errors.Is(err, errNotFound) {
				return retry.Stop
			}
			return retry.Undecided
		}, retry.DefaultClassifier),
		Observe: func(_ context.Context, e retry.Event) { // OnRetry; Attempt counts from 1
			if e.Retry {
				fmt.Printf("#%d: %s\n", e.Attempt, e.Err)
			}
		},
	}
	calls := 0
	user, err := retry.DoValue(context.Background(), func(context.Context) (string, error) {
		if calls++; calls < 3 {
			return "", syscall.ECONNREFUSED
		}
		return "ada", nil
	}, policy)
	fmt.Println(user, err)

	_, err = retry.DoValue(context.Background(), func(context.Context) (string, error) { return "", errNotFound }, policy)
	// LastErrorOnly(true) is the default here: the last attempt's error is
	// reachable with errors.Is, and the stop reason too.
	fmt.Println(errors.Is(err, errNotFound), errors.Is(err, retry.ErrNotRetryable))
	// Output:
	// 100ms 200ms 400ms 800ms 1.6s 2s
	// #1: connection refused
	// #2: connection refused
	// ada <nil>
	// true true
}

// fibonacci is sethvargo/go-retry's NewFibonacci(base) as a retry.Backoff:
// a pure function of the retry number, so one value serves every call.
type fibonacci time.Duration

func (f fibonacci) Delay(n int, _ time.Duration, _ float64) time.Duration {
	a, b := 1, 1
	for i := 1; i < n; i++ {
		a, b = b, a+b
	}
	return time.Duration(a) * time.Duration(f)
}

// sethvargo/go-retry:
//
//	b := retry.NewExponential(time.Second)
//	b = retry.WithMaxRetries(3, b)               // retries: 4 attempts in all
//	b = retry.WithCappedDuration(10*time.Second, b)
//	err := retry.Do(ctx, b, func(ctx context.Context) error {
//		if err := call(ctx); err != nil {
//			return retry.RetryableError(err) // only marked errors are retried
//		}
//		return nil
//	})
func Example_sethvargoGoRetry() {
	b := retry.Exponential{Base: time.Second, Cap: 10 * time.Second, Jitter: retry.NoJitter}
	fib := fibonacci(time.Second)
	fmt.Println(schedule(b, 5))
	fmt.Println(schedule(fib, 5))

	// go-retry retries only what is marked RetryableError; here the mark is
	// retry.Transient, and a classifier that stops on everything else.
	policy := retry.Policy{
		MaxAttempts: 4,
		Backoff:     retry.Constant(time.Nanosecond), // b or fib in real code
		Classifier:  func(error) retry.Decision { return retry.Stop },
	}
	calls := 0
	err := retry.Do(context.Background(), func(context.Context) error {
		calls++
		return retry.Transient(errors.New("busy"))
	}, policy)
	fmt.Println(calls, "calls:", err)

	calls = 0
	err = retry.Do(context.Background(), func(context.Context) error {
		calls++
		return errors.New("bad input")
	}, policy)
	fmt.Println(calls, "call:", err)
	// Output:
	// 1s 2s 4s 8s 10s
	// 1s 1s 2s 3s 5s
	// 4 calls: retry: gave up after 4 attempts (attempts exhausted): busy
	// 1 call: retry: gave up after 1 attempt (error not retryable): bad input
}
