package retryhttp_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// reply is what the test server answers to one request.
type reply struct {
	status  int
	header  map[string]string
	body    string
	chunked bool // no Content-Length: the client cannot know the body's size
}

// seen is a request as the test server received it.
type seen struct {
	method string
	body   string
	header http.Header
}

// server is a loopback httptest server that answers its n-th request with
// replies[n-1] (the last reply repeats), and records the requests and the
// connections it accepts.
type server struct {
	*httptest.Server
	replies  []reply
	newConns atomic.Int64

	mu   sync.Mutex
	seen []seen
}

func newServer(t *testing.T, replies ...reply) *server {
	t.Helper()
	require.NotEmpty(t, replies)
	s := &server{replies: replies}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.newConns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, seen{method: r.Method, body: string(body), header: r.Header.Clone()})
	s.mu.Unlock()

	rep := s.replies[min(n, len(s.replies)-1)]
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if !rep.chunked {
		w.Header().Set("Content-Length", strconv.Itoa(len(rep.body)))
	}
	w.WriteHeader(rep.status)
	if rep.chunked {
		w.(http.Flusher).Flush()
	}
	io.WriteString(w, rep.body)
}

// requests returns the requests received so far.
func (s *server) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.seen...)
}

// tracker is a Base that counts its calls and wraps each response body, to
// observe how much of it was read and whether it was closed.
type tracker struct {
	base http.RoundTripper

	mu     sync.Mutex
	calls  int
	bodies []*trackedBody
}

func (tr *tracker) RoundTrip(req *http.Request) (*http.Response, error) {
	tr.mu.Lock()
	tr.calls++
	tr.mu.Unlock()
	resp, err := tr.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		b := &trackedBody{rc: resp.Body}
		resp.Body = b
		tr.mu.Lock()
		tr.bodies = append(tr.bodies, b)
		tr.mu.Unlock()
	}
	return resp, err
}

func (tr *tracker) Calls() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.calls
}

func (tr *tracker) Bodies() []*trackedBody {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*trackedBody(nil), tr.bodies...)
}

type trackedBody struct {
	rc     io.ReadCloser
	read   atomic.Int64
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return b.rc.Close()
}

// readAll reads and closes resp's body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// roundTripperFunc makes a func a RoundTripper, for the tests that must not
// touch the network (synctest bubbles) or that observe the Base itself.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newServerFunc is a loopback httptest server with its own handler.
func newServerFunc(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
