package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed93a044d1/retry"
)

// Do calls the function again until it succeeds. Without options it makes at
// most 4 attempts and waits up to 100ms, then up to 200ms, then up to 400ms
// between them; the examples wait 0 so that they run at once.
func Example() {
	calls := 0
	ping := func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("server busy")
		}
		return nil
	}

	err := retry.Do(context.Background(), ping, retry.Policy{Backoff: retry.Constant(0)})
	fmt.Println("err:", err)
	fmt.Println("attempts:", calls)
	// Output:
	// err: <nil>
	// attempts: 3
}

type user struct{ Name string }

func ExampleDoValue() {
	// A Policy is a plain value: declare it once, share it everywhere.
	policy := retry.Policy{
		MaxAttempts: 5,
		Backoff:     retry.Exponential{Base: time.Nanosecond, Cap: 10 * time.Nanosecond},
	}

	calls := 0
	lookup := func(ctx context.Context) (user, error) {
		calls++
		if calls < 2 {
			return user{}, syscall.ECONNRESET
		}
		return user{Name: "ada"}, nil
	}

	u, err := retry.DoValue(context.Background(), lookup, policy)
	fmt.Println(u.Name, err, calls)
	// Output: ada <nil> 2
}

var errNotFound = errors.New("not found")

func ExamplePermanent() {
	calls := 0
	err := retry.Do(context.Background(), func(ctx context.Context) error {
		calls++
		// Another attempt would get the same answer: say so.
		return retry.Permanent(fmt.Errorf("user 42: %w", errNotFound))
	})
	fmt.Println(err)
	fmt.Println("attempts:", calls)
	fmt.Println("not retryable:", errors.Is(err, retry.ErrNotRetryable))
	fmt.Println("not found:", errors.Is(err, errNotFound))
	// Output:
	// retry: gave up after 1 attempt (error not retryable): user 42: not found
	// attempts: 1
	// not retryable: true
	// not found: true
}

func ExampleCheckResponse() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.Header().Set("Retry-After", "0") // a real server would ask for seconds
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	get := func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return "", retry.Permanent(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close() // CheckResponse leaves the body to us, on every attempt
		if err := retry.CheckResponse(resp); err != nil {
			return "", err
		}
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	policy := retry.Policy{
		Backoff: retry.Constant(0),
		Observe: func(_ context.Context, e retry.Event) {
			if e.Retry {
				fmt.Println("retrying after:", e.Err)
			}
		},
	}
	body, err := retry.DoValue(context.Background(), get, policy)
	fmt.Println(body, err)
	// Output:
	// retrying after: retry: HTTP 503 Service Unavailable
	// hello <nil>
}

func ExampleNewBudget() {
	// One budget for every call to the same dependency: retries for 10% of
	// the calls, and no floor, so that the example is exact.
	budget := retry.NewBudget(0.1, 0)
	policy := retry.Policy{Backoff: retry.Constant(0), Budget: budget}
	ctx := context.Background()
	failing := func(context.Context) error { return syscall.ECONNREFUSED }

	// The bucket starts empty: the first call may not retry.
	err := retry.Do(ctx, failing, policy)
	fmt.Println(errors.Is(err, retry.ErrBudgetExhausted), budget.Balance())

	// Nine calls that succeed bring the balance to one retry.
	for range 9 {
		_ = retry.Do(ctx, func(context.Context) error { return nil }, policy)
	}
	fmt.Println(budget.Balance())

	// The next failing call spends it, then is refused again.
	err = retry.Do(ctx, failing, policy)
	var e *retry.Error
	if errors.As(err, &e) {
		fmt.Println(e.Attempts, e.Reason, budget.Balance())
	}
	// Output:
	// true 0.1
	// 1
	// 2 retry: retry budget exhausted 0.1
}

func ExampleError() {
	err := retry.Do(context.Background(), func(context.Context) error {
		return io.ErrUnexpectedEOF
	}, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})

	fmt.Println(err)
	var e *retry.Error
	if errors.As(err, &e) {
		fmt.Println("attempts:", e.Attempts)
		fmt.Println("reason:", e.Reason)
		fmt.Println("last:", e.Last)
		// The connection broke mid-way: the work may have been done.
		fmt.Println("outcome unknown:", e.OutcomeUnknown)
	}
	fmt.Println(errors.Is(err, retry.ErrExhausted), errors.Is(err, io.ErrUnexpectedEOF))
	// Output:
	// retry: gave up after 3 attempts (attempts exhausted): unexpected EOF
	// attempts: 3
	// reason: retry: attempts exhausted
	// last: unexpected EOF
	// outcome unknown: true
	// true true
}

// Do stops at once when the next attempt could not start before the
// caller's deadline, instead of sleeping into it.
func ExampleDo_deadline() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	calls := 0
	err := retry.Do(ctx, func(context.Context) error {
		calls++
		return syscall.ECONNREFUSED
	}, retry.Policy{Backoff: retry.Constant(time.Hour)})

	fmt.Println("attempts:", calls)
	fmt.Println("no time left:", errors.Is(err, retry.ErrNoTimeLeft))
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("last error kept:", errors.Is(err, syscall.ECONNREFUSED))
	// Output:
	// attempts: 1
	// no time left: true
	// deadline exceeded: true
	// last error kept: true
}

// Observe sees each attempt and the end of each call, with the caller's
// context, so a slog handler that reads trace IDs from the context puts them
// on every line.
func ExamplePolicy_observe() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		// Drop the times so that the output is the same on every run.
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "took", "elapsed":
				return slog.Attr{}
			}
			return a
		},
	}))
	observe := func(ctx context.Context, e retry.Event) {
		switch {
		case e.Done && e.Err == nil:
			logger.InfoContext(ctx, "call succeeded", "attempts", e.Attempt, "elapsed", e.Elapsed)
		case e.Done:
			logger.ErrorContext(ctx, "call failed", "attempts", e.Attempt, "reason", e.Reason,
				"outcome_unknown", e.OutcomeUnknown, "elapsed", e.Elapsed)
		case e.Retry:
			logger.WarnContext(ctx, "attempt failed, retrying", "attempt", e.Attempt, "took", e.Duration,
				"err", e.Err, "wait", e.Wait, "wait_set_by", e.WaitSetBy())
		case e.Err != nil:
			logger.WarnContext(ctx, "attempt failed", "attempt", e.Attempt, "took", e.Duration, "err", e.Err)
		default:
			logger.InfoContext(ctx, "attempt succeeded", "attempt", e.Attempt, "took", e.Duration)
		}
	}
	policy := retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0), Observe: observe}

	failing := func(times int) func(context.Context) error {
		calls := 0
		return func(context.Context) error {
			if calls++; calls <= times {
				return syscall.ECONNRESET
			}
			return nil
		}
	}
	_ = retry.Do(context.Background(), failing(0), policy)  // success
	_ = retry.Do(context.Background(), failing(2), policy)  // success after two retries
	_ = retry.Do(context.Background(), failing(10), policy) // exhausted
	// Output:
	// level=INFO msg="attempt succeeded" attempt=1
	// level=INFO msg="call succeeded" attempts=1
	// level=WARN msg="attempt failed, retrying" attempt=1 err="connection reset by peer" wait=0s wait_set_by=backoff
	// level=WARN msg="attempt failed, retrying" attempt=2 err="connection reset by peer" wait=0s wait_set_by=backoff
	// level=INFO msg="attempt succeeded" attempt=3
	// level=INFO msg="call succeeded" attempts=3
	// level=WARN msg="attempt failed, retrying" attempt=1 err="connection reset by peer" wait=0s wait_set_by=backoff
	// level=WARN msg="attempt failed, retrying" attempt=2 err="connection reset by peer" wait=0s wait_set_by=backoff
	// level=WARN msg="attempt failed" attempt=3 err="connection reset by peer"
	// level=ERROR msg="call failed" attempts=3 reason="retry: attempts exhausted" outcome_unknown=true
}

// A queue worker stores the time of a job's next attempt instead of sleeping.
// The time and the draw u are fixed here; a worker uses time.Now() and
// rand.Float64().
func ExampleNext() {
	policy := retry.Policy{
		MaxAttempts: 10,
		Backoff:     retry.Exponential{Base: time.Second, Cap: time.Minute, Jitter: retry.EqualJitter},
	}
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	deadline := start.Add(8 * time.Second) // the job is worthless after this
	errMailbox := errors.New("smtp: 421 try again later")

	now, prev := start, time.Duration(0)
	for attempt := 1; ; attempt++ {
		wait, stop := retry.Next(policy, attempt, prev, errMailbox, now, deadline, 0.5)
		if stop != nil {
			fmt.Printf("attempt %d failed: %v\n", attempt, stop)
			return
		}
		now, prev = now.Add(wait), wait
		fmt.Printf("attempt %d failed: wait %v, run again at %s\n", attempt, wait, now.Format("15:04:05.000"))
	}
	// Output:
	// attempt 1 failed: wait 750ms, run again at 12:00:00.750
	// attempt 2 failed: wait 1.5s, run again at 12:00:02.250
	// attempt 3 failed: wait 3s, run again at 12:00:05.250
	// attempt 4 failed: retry: no time left before the deadline
}

func ExampleClassifiers() {
	errQuota := errors.New("quota exceeded until tomorrow")
	mine := func(err error) retry.Decision {
		if errors.Is(err, errQuota) {
			return retry.Stop
		}
		return retry.Undecided
	}
	// My rule first, then the defaults, then stop on anything still unknown.
	strict := retry.Classifiers(mine, retry.DefaultClassifier, func(error) retry.Decision { return retry.Stop })

	for _, err := range []error{
		fmt.Errorf("upload: %w", errQuota),
		fmt.Errorf("upload: %w", syscall.ECONNRESET),
		&retry.ResponseError{StatusCode: http.StatusTooManyRequests},
		&retry.ResponseError{StatusCode: http.StatusNotFound},
		errors.New("something new"),
	} {
		fmt.Printf("%v: %v\n", err, strict(err))
	}
	// Output:
	// upload: quota exceeded until tomorrow: stop
	// upload: connection reset by peer: retry
	// retry: HTTP 429: retry
	// retry: HTTP 404: stop
	// something new: stop
}

func ExampleExponential() {
	b := retry.Exponential{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	none := b
	none.Jitter = retry.NoJitter
	equal := b
	equal.Jitter = retry.EqualJitter

	// Full jitter (the default) waits u times the ceiling; equal jitter
	// keeps at least half of it. Cap applies before jitter.
	for n := 1; n <= 6; n++ {
		fmt.Printf("retry %d: ceiling %v, full(u=0.5) %v, equal(u=0) %v\n",
			n, none.Delay(n, 0, 0), b.Delay(n, 0, 0.5), equal.Delay(n, 0, 0))
	}
	// Output:
	// retry 1: ceiling 100ms, full(u=0.5) 50ms, equal(u=0) 50ms
	// retry 2: ceiling 200ms, full(u=0.5) 100ms, equal(u=0) 100ms
	// retry 3: ceiling 400ms, full(u=0.5) 200ms, equal(u=0) 200ms
	// retry 4: ceiling 800ms, full(u=0.5) 400ms, equal(u=0) 400ms
	// retry 5: ceiling 1.6s, full(u=0.5) 800ms, equal(u=0) 800ms
	// retry 6: ceiling 2s, full(u=0.5) 1s, equal(u=0) 1s
}

func ExampleDecorrelated() {
	b := retry.Decorrelated{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	// The loop passes the previous wait as prev; u = 0.5 each time here.
	var prev time.Duration
	for n := 1; n <= 5; n++ {
		prev = b.Delay(n, prev, 0.5)
		fmt.Println(prev)
	}
	// Output:
	// 200ms
	// 350ms
	// 575ms
	// 912.5ms
	// 1.41875s
}

func ExampleParseRetryAfter() {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Wed, 01 Jan 2025 12:00:30 GMT", "Tue, 31 Dec 2024 23:00:00 GMT", "1.5", ""} {
		d, ok := retry.ParseRetryAfter(v, now)
		fmt.Printf("%q: %v %v\n", v, d, ok)
	}
	// Output:
	// "120": 2m0s true
	// "Wed, 01 Jan 2025 12:00:30 GMT": 30s true
	// "Tue, 31 Dec 2024 23:00:00 GMT": 0s true
	// "1.5": 0s false
	// "": 0s false
}

// Telling "the call ran out of time" from "the last attempt timed out": the
// whole error matches context.DeadlineExceeded in both cases, because the
// last attempt's error is reachable too; the Reason tells them apart.
func ExampleError_Timeout() {
	timedOut := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	err := retry.Do(context.Background(), timedOut, retry.Policy{
		MaxAttempts:    2,
		AttemptTimeout: time.Nanosecond,
		Backoff:        retry.Constant(0),
	})
	var re *retry.Error
	errors.As(err, &re)
	fmt.Println("whole error is DeadlineExceeded:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("ran out of time:", re.Timeout(), errors.Is(re.Reason, context.DeadlineExceeded))
	fmt.Println("last attempt timed out:", errors.Is(re.Last, context.DeadlineExceeded))
	fmt.Println("reason:", re.Reason)

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err = retry.Do(ctx, timedOut)
	errors.As(err, &re)
	fmt.Println("ran out of time:", re.Timeout(), errors.Is(re.Reason, context.DeadlineExceeded))
	// Output:
	// whole error is DeadlineExceeded: true
	// ran out of time: false false
	// last attempt timed out: true
	// reason: retry: attempts exhausted
	// ran out of time: true true
}

// A call whose first attempt is slow is hedged: after 20ms without an
// answer, a second attempt starts beside it, wins, and the first is
// cancelled at once.
func ExamplePolicy_hedge() {
	var attempts atomic.Int32 // a hedged fn runs on several goroutines at once
	fetch := func(ctx context.Context) error {
		if attempts.Add(1) == 1 {
			<-ctx.Done() // a slow replica: it would answer much later
			return ctx.Err()
		}
		return nil // a fast one
	}
	err := retry.Do(context.Background(), fetch, retry.Policy{
		HedgeDelay: retry.Constant(20 * time.Millisecond),
		Observe: func(_ context.Context, e retry.Event) {
			switch {
			case e.Done:
				fmt.Println("done after", e.Attempt, "attempts")
			case e.Err == nil:
				fmt.Println("attempt", e.Attempt, "won, hedge:", e.Hedge)
			default:
				fmt.Println("attempt", e.Attempt, "cancelled:", errors.Is(e.Err, context.Canceled))
			}
		},
	})
	fmt.Println("error:", err)
	// Output:
	// attempt 2 won, hedge: true
	// attempt 1 cancelled: true
	// done after 2 attempts
	// error: <nil>
}

// file stands for a value that must be closed, such as a response body or a
// database cursor.
type file struct {
	attempt int
	closed  bool
}

func (f *file) Close() error { f.closed = true; return nil }

// The value of a hedged call is the winner's. Here the first attempt is
// stuck until the call cancels it, and the hedge started 1ms later wins. The
// winner's value is the caller's; a loser's value that comes back anyway is
// closed by DoValue, since no one else can.
func ExampleDoValue_hedge() {
	var loser *file
	policy := retry.Policy{HedgeDelay: retry.Constant(time.Millisecond)}
	won, err := retry.DoValue(context.Background(), func(ctx context.Context) (*file, error) {
		f := &file{attempt: retry.AttemptFrom(ctx)}
		if f.attempt == 1 {
			<-ctx.Done() // stuck until the hedge wins
			loser = f
			return f, nil // it answers anyway
		}
		return f, nil
	}, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("won by attempt", won.attempt, "closed:", won.closed)
	fmt.Println("loser attempt", loser.attempt, "closed:", loser.closed)
	// Output:
	// won by attempt 2 closed: false
	// loser attempt 1 closed: true
}
