package faults_test

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/internal/faults"
)

// An HTTP/1 server takes one turn per request, on kept-alive connections
// too, and records each request it read.
func TestHTTP1TurnsAndRecord(t *testing.T) {
	t.Parallel()
	s := faults.HTTP1(faults.H1OK, faults.H1Unavailable, faults.H1CloseAfterRequest, faults.H1OK)
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	get := func(path string) (int, error) {
		req, err := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	code, err := get("/a")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	code, err = get("/b")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	// The server reads /c and closes the kept-alive connection; net/http
	// sends the GET again on a new one, where the plan's last action, OK,
	// answers it.
	code, err = get("/c")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	assert.Equal(t, []faults.Request{
		{Conn: 0, Method: "GET", Path: "/a"},
		{Conn: 0, Method: "GET", Path: "/b"},
		{Conn: 0, Method: "GET", Path: "/c"},
		{Conn: 1, Method: "GET", Path: "/c"},
	}, s.Requests())
	assert.Equal(t, 2, s.Conns())
}

// A pipe server works inside a synctest bubble, and closing it and the
// transport leaves no goroutine behind (the bubble would report one).
func TestPipeHTTP2InBubble(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := faults.PipeHTTP2(faults.H2{Kind: faults.H2Reset, Code: faults.RefusedStream}, faults.H2{Kind: faults.H2OK})
		defer s.Close()
		tr := &http.Transport{DialContext: s.DialContext, Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		defer tr.CloseIdleConnections()

		req, err := http.NewRequest(http.MethodGet, s.URL()+"/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []faults.Request{{Conn: 0, Stream: 1}, {Conn: 0, Stream: 3}}, s.Requests())
	})
}
