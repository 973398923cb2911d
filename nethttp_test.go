package retry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/faults"
)

// TestOutcomeUnderRealFaults sends a POST with an Idempotency-Key through
// retry.Do around a plain http.Client to servers that fail on purpose, on
// loopback (or over net.Pipe in a synctest bubble, where net/http's own
// retries take a minute of fake time), and checks that OutcomeUnknown says
// what the server really did, and what the default classifier decides.
// retryhttp's tests run the same table through its Transport.
func TestOutcomeUnderRealFaults(t *testing.T) {
	t.Parallel()
	for _, sc := range faults.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			if sc.Pipe {
				synctest.Test(t, func(t *testing.T) { checkClientUnderFault(t, sc) })
			} else {
				checkClientUnderFault(t, sc)
			}
		})
	}
}

func checkClientUnderFault(t *testing.T, sc faults.Scenario) {
	s := sc.Start()
	defer s.Close()
	tr := sc.Transport(s)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// A generous bound that only a hang reaches; in a bubble it is fake.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	firstRequests, firstConns := -1, -1 // what the server saw during attempt 1
	var attemptUnknown []bool           // each failed attempt's OutcomeUnknown, as Observe saw it
	p := retry.Policy{MaxAttempts: 2, Backoff: retry.Constant(0), Observe: func(_ context.Context, ev retry.Event) {
		if ev.Done || ev.Err == nil {
			return
		}
		attemptUnknown = append(attemptUnknown, ev.OutcomeUnknown)
		if ev.Attempt == 1 {
			firstRequests, firstConns = len(s.Requests()), s.Conns()
		}
	}}
	err := retry.Do(ctx, func(ctx context.Context) error {
		var body io.Reader = strings.NewReader("payload")
		if sc.StreamingBody {
			body = io.NopCloser(body) // http.NewRequest sets no GetBody for it
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, sc.URL(s, "/orders"), body)
		if err != nil {
			return retry.Permanent(err)
		}
		req.Header.Set("Idempotency-Key", "order-1")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return retry.CheckResponse(resp)
	}, p)

	if sc.Decision == "" {
		require.NoError(t, err)
		assert.Equal(t, sc.Requests, len(s.Requests()), "requests the server read")
		// net/http may dial one connection more than it uses (a dial it
		// started for the retry while another became free, on a loaded
		// machine): what the server read is exact, its connections a floor.
		assert.GreaterOrEqual(t, s.Conns(), sc.Conns, "connections the server accepted")
		assert.LessOrEqual(t, s.Conns(), sc.Conns+1, "connections the server accepted")
		return
	}
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	var ue *url.Error
	require.ErrorAs(t, re.Last, &ue, "http.Client's error")
	t.Logf("last error: %v", re.Last)
	got := retry.DefaultClassifier(re.Last).String()
	assert.Equal(t, sc.Decision, got, "DefaultClassifier(%v)", re.Last)
	assert.Equal(t, sc.Unknown, retry.OutcomeUnknown(re.Last), "OutcomeUnknown(%v)", re.Last)
	assert.Equal(t, sc.Unknown, re.OutcomeUnknown, "Error.OutcomeUnknown")
	if sc.Decision == "stop" {
		assert.Equal(t, 1, re.Attempts)
		assert.ErrorIs(t, err, retry.ErrNotRetryable)
	} else {
		assert.Equal(t, 2, re.Attempts)
		assert.Equal(t, []bool{sc.Unknown, sc.Unknown}, attemptUnknown, "each attempt's OutcomeUnknown")
		assert.ErrorIs(t, err, retry.ErrExhausted)
		assert.Equal(t, sc.Requests, firstRequests, "requests the server read in attempt 1")
		assert.Equal(t, sc.Conns, firstConns, "connections the server accepted in attempt 1")
		assert.Equal(t, 2*sc.Requests, len(s.Requests()), "requests the server read in both attempts")
	}
	assert.NoError(t, ctx.Err(), "the call outlived its context: %v", err)
}

// TestOutcomeUnknownDoesNotAllocateOnHTTPErrors reads real errors from the
// fault servers, then checks that neither OutcomeUnknown nor the default
// classifier allocates on them: both run after every failed attempt. It
// does not call t.Parallel, since AllocsPerRun counts every allocation in
// the process.
func TestOutcomeUnknownDoesNotAllocateOnHTTPErrors(t *testing.T) {
	errs := map[string]error{}
	for _, sc := range faults.Scenarios {
		if sc.Pipe || sc.Decision == "" || sc.Configure != nil {
			continue
		}
		s := sc.Start()
		tr := sc.Transport(s)
		var body io.Reader = strings.NewReader("payload")
		if sc.StreamingBody {
			body = io.NopCloser(body)
		}
		req, err := http.NewRequest(http.MethodPost, sc.URL(s, "/"), body)
		require.NoError(t, err)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
		s.Close()
		require.Error(t, err, sc.Name)
		errs[sc.Name] = err
	}
	require.NotEmpty(t, errs)
	for name, err := range errs {
		t.Run(name, func(t *testing.T) {
			var unknown bool
			var d retry.Decision
			allocs := testing.AllocsPerRun(1000, func() {
				unknown = retry.OutcomeUnknown(err)
				d = retry.DefaultClassifier(err)
			})
			assert.Zero(t, allocs, "OutcomeUnknown and DefaultClassifier(%v) allocate %v times, want 0", err, allocs)
			assert.Equal(t, retry.OutcomeUnknown(err), unknown)
			assert.Equal(t, retry.DefaultClassifier(err), d)
		})
	}
}

// A caller who cancels after the request has left cannot know whether the
// server carried it out: the call's outcome is unknown, as it is when a
// deadline ends it. Here the server does the work and then waits for the
// cancel before it would answer.
func TestOutcomeUnknownWhenCallerCancelsInFlight(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		done <- struct{}{} // the work is done
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-done; cancel() }()
	err := retry.Do(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("charge"))
		if err != nil {
			return err
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return retry.CheckResponse(resp)
	})
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, re.Reason, context.Canceled)
	assert.Equal(t, 1, re.Attempts)
	assert.True(t, re.OutcomeUnknown, "the request had left when the caller cancelled")
}
