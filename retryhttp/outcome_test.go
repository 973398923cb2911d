package retryhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/faults"
	"github.com/seed93a044d1/retry/retryhttp"
)

// TestOutcomeUnderRealFaults sends a POST with an Idempotency-Key through a
// retrying client to servers that fail on purpose, on loopback (or over
// net.Pipe in a synctest bubble, where net/http's own retries take a minute
// of fake time), and checks that OutcomeUnknown says what the server really
// did, and what the default classifier decides. The root package's tests
// run the same table through retry.Do around a plain http.Client.
func TestOutcomeUnderRealFaults(t *testing.T) {
	t.Parallel()
	for _, sc := range faults.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			if sc.Pipe {
				synctest.Test(t, func(t *testing.T) { checkTransportUnderFault(t, sc) })
			} else {
				checkTransportUnderFault(t, sc)
			}
		})
	}
}

func checkTransportUnderFault(t *testing.T, sc faults.Scenario) {
	s := sc.Start()
	defer s.Close()
	tr := sc.Transport(s)
	defer tr.CloseIdleConnections()
	firstRequests, firstConns := -1, -1 // what the server saw during attempt 1
	var attemptUnknown []bool           // each failed attempt's OutcomeUnknown, as Observe saw it
	client := retryhttp.NewClient(&http.Client{Transport: tr}, retry.Policy{
		MaxAttempts: 2,
		Backoff:     retry.Constant(0),
		Observe: func(_ context.Context, ev retry.Event) {
			if ev.Done || ev.Err == nil {
				return
			}
			attemptUnknown = append(attemptUnknown, ev.OutcomeUnknown)
			if ev.Attempt == 1 {
				firstRequests, firstConns = len(s.Requests()), s.Conns()
			}
		},
	})

	// A generous bound that only a hang reaches; in a bubble it is fake.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	var body io.Reader = strings.NewReader("payload")
	if sc.StreamingBody {
		body = io.NopCloser(body) // http.NewRequest sets no GetBody for it
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sc.URL(s, "/orders"), body)
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "order-1")
	resp, err := client.Do(req)
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	if sc.Decision == "" {
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, sc.Requests, len(s.Requests()), "requests the server read")
		// net/http may dial one connection more than it uses (a dial it
		// started for the retry while another became free, on a loaded
		// machine): what the server read is exact, its connections a floor.
		assert.GreaterOrEqual(t, s.Conns(), sc.Conns, "connections the server accepted")
		assert.LessOrEqual(t, s.Conns(), sc.Conns+1, "connections the server accepted")
		return
	}
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "the call outlived its context: %v", err)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	if sc.StreamingBody {
		// A call of one attempt, which says why it was not repeated, and
		// whose error the core's functions still read right.
		assert.Equal(t, 1, re.Attempts)
		assert.Equal(t, sc.Decision, retry.DefaultClassifier(re.Last).String(), "DefaultClassifier(%v)", re.Last)
		if sc.Decision == "retry" {
			assert.Equal(t, retryhttp.ErrBodyNotReplayable, re.Reason)
		}
		assert.Equal(t, sc.Unknown, retry.OutcomeUnknown(re.Last), "OutcomeUnknown(%v)", re.Last)
		assert.Equal(t, sc.Unknown, re.OutcomeUnknown, "Error.OutcomeUnknown")
		assert.Equal(t, sc.Requests, len(s.Requests()), "requests the server read")
		return
	}
	t.Logf("last error: %v", re.Last)
	assert.Equal(t, sc.Decision, retry.DefaultClassifier(re.Last).String(), "DefaultClassifier(%v)", re.Last)
	assert.Equal(t, sc.Unknown, retry.OutcomeUnknown(re.Last), "OutcomeUnknown(%v)", re.Last)
	assert.Equal(t, sc.Unknown, re.OutcomeUnknown, "Error.OutcomeUnknown")
	assert.Equal(t, 2, re.Attempts)
	assert.Equal(t, []bool{sc.Unknown, sc.Unknown}, attemptUnknown, "each attempt's OutcomeUnknown")
	assert.ErrorIs(t, err, retry.ErrExhausted)
	assert.Equal(t, sc.Requests, firstRequests, "requests the server read in attempt 1")
	assert.Equal(t, sc.Conns, firstConns, "connections the server accepted in attempt 1")
	assert.Equal(t, 2*sc.Requests, len(s.Requests()), "requests the server read in both attempts")
}

// The error of an attempt keeps the transport's text and identity: the
// connection closed after the server read the request, and net/http said
// so with a bare io.EOF.
func TestAttemptErrorKeepsTransportError(t *testing.T) {
	t.Parallel()
	s := faults.HTTP1(faults.H1CloseAfterRequest)
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	rt := &retryhttp.Transport{Base: tr, Policy: retry.Policy{MaxAttempts: 1}}
	req, err := http.NewRequest(http.MethodPut, s.URL()+"/orders/1", strings.NewReader("payload"))
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)
	require.Nil(t, resp)
	var re *retry.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "EOF", re.Last.Error())
	assert.ErrorIs(t, re.Last, io.EOF)
	assert.Equal(t, "retry: gave up after 1 attempt (attempts exhausted): EOF", err.Error())
	assert.True(t, re.OutcomeUnknown, "the server read the request, then closed")
	assert.Len(t, s.Requests(), 1)
}
