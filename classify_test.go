package retry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

// The errors below are made by real sockets on 127.0.0.1, outside any
// synctest bubble, so that the rules are checked against what the standard
// library really returns rather than against hand-built lookalikes.

// refusedError dials a loopback port nothing listens on: a listener reserves
// a free port and is closed before the dial.
func refusedError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	conn, err := net.Dial("tcp", addr)
	if conn != nil {
		conn.Close()
	}
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	return err
}

// quietServer starts an httptest server that never logs: a failed handshake
// or a cut request is the point of the tests that use it.
func quietServer(t *testing.T, useTLS bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// untrustedCertError is what http.Get with the default client returns for a
// server whose certificate no trusted root signed.
func untrustedCertError(t *testing.T) error {
	t.Helper()
	srv := quietServer(t, true)
	resp, err := http.Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	var verr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &verr)
	var uerr *url.Error
	require.ErrorAs(t, err, &uerr, "the TLS error comes wrapped in a *url.Error")
	var nerr net.Error
	require.ErrorAs(t, err, &nerr, "*url.Error is a net.Error")
	return err
}

// tlsToPlainError is what a TLS client gets from a plain HTTP server: the
// server answers the ClientHello with an HTTP 400, which is no TLS record.
// The server answers at once because every ClientHello holds a 0x0a byte
// (the supported_groups extension's type), which ends its request line.
func tlsToPlainError(t *testing.T) error {
	t.Helper()
	srv := quietServer(t, false)
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{ServerName: "example.test"})
	if conn != nil {
		conn.Close()
	}
	var rerr tls.RecordHeaderError
	require.ErrorAs(t, err, &rerr)
	return err
}

// schemeMismatchError is what http.Get returns for an https URL served by a
// plain HTTP server: http.Client replaces the tls.RecordHeaderError with
// http.ErrSchemeMismatch.
func schemeMismatchError(t *testing.T) error {
	t.Helper()
	srv := quietServer(t, false)
	resp, err := http.Get("https://" + srv.Listener.Addr().String())
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, http.ErrSchemeMismatch)
	return err
}

// resetError reads from a connection the server aborted: SetLinger(0) makes
// Close send a RST instead of a FIN.
func resetError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	dialed, aborted := make(chan struct{}), make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			aborted <- err
			return
		}
		// A RST that arrives before Dial has read the socket's status would
		// fail the dial itself.
		<-dialed
		err = conn.(*net.TCPConn).SetLinger(0)
		if cerr := conn.Close(); err == nil {
			err = cerr
		}
		aborted <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	close(dialed)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, <-aborted)
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET)
	return err
}

// readTimeoutError reads from a connection whose read deadline has long
// passed, so the read fails at once: no sleep, nothing timing-dependent.
func readTimeoutError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String()) // the kernel's backlog accepts it
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetReadDeadline(time.Unix(1, 0)))
	_, err = conn.Read(make([]byte, 1))
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "Timeout() of %v", err)
	return err
}

// dnsNotFoundError looks up a name with a Go resolver whose only server is a
// fake one on 127.0.0.1 that answers NXDOMAIN to every query.
func dnsNotFoundError(t *testing.T) error {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { serveNXDOMAIN(pc); close(served) }()
	t.Cleanup(func() { pc.Close(); <-served })
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}
	_, err = r.LookupHost(t.Context(), "no-such-host.test.")
	var derr *net.DNSError
	require.ErrorAs(t, err, &derr)
	require.True(t, derr.IsNotFound, "IsNotFound of %v", err)
	return err
}

// serveNXDOMAIN answers every DNS query on pc with NXDOMAIN until pc is closed.
func serveNXDOMAIN(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply := nxdomain(buf[:n]); reply != nil {
			_, _ = pc.WriteTo(reply, addr)
		}
	}
}

// nxdomain builds the reply "no such name" to a DNS query (RFC 1035, section
// 4.1): the query's ID and question, QR set, RCODE 3, and no records.
func nxdomain(query []byte) []byte {
	const headerLen = 12
	end := headerLen
	for end < len(query) && query[end] != 0 { // QNAME's labels; a query has no compression
		end += 1 + int(query[end])
	}
	end += 1 + 4 // the root label, QTYPE, QCLASS
	if end > len(query) {
		return nil
	}
	reply := make([]byte, end)
	copy(reply, query[:headerLen])
	copy(reply[headerLen:], query[headerLen:end])
	reply[2] = 0x80 | query[2]&0x79 // QR; keep the opcode and RD
	reply[3] = 0x80 | 3             // RA; RCODE 3, NXDOMAIN
	reply[4], reply[5] = 0, 1       // QDCOUNT 1; ANCOUNT, NSCOUNT, ARCOUNT 0
	clear(reply[6:headerLen])
	return reply
}

// httpWriteTimeoutError is what http.Client returns when a write times out
// after part of the request went out: "transport connection broken: %w"
// inside the *url.Error, whose own Timeout() then says false.
func httpWriteTimeoutError(t *testing.T) error {
	t.Helper()
	srv := quietServer(t, false)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return oneByteThenTimeout{conn}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var uerr *url.Error
	require.ErrorAs(t, err, &uerr)
	require.False(t, uerr.Timeout(), "the *url.Error hides the timeout: %v", err)
	return err
}

// oneByteThenTimeout is a net.Conn whose write deadline passes after the
// first byte of a write.
type oneByteThenTimeout struct{ net.Conn }

func (c oneByteThenTimeout) Write(p []byte) (int, error) {
	if len(p) < 2 {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p[:1])
	if err != nil {
		return n, err
	}
	if err := c.Conn.SetWriteDeadline(time.Unix(1, 0)); err != nil {
		return n, err
	}
	m, err := c.Conn.Write(p[1:])
	return n + m, err
}

func TestDefaultClassifierRealErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		err            error
		want           retry.Decision
		outcomeUnknown bool
	}{
		{"connection refused", refusedError(t), retry.Retry, false},
		{"untrusted certificate", untrustedCertError(t), retry.Stop, false},
		{"TLS client, plain server", tlsToPlainError(t), retry.Stop, false},
		{"https URL, plain server", schemeMismatchError(t), retry.Stop, false},
		{"connection reset", resetError(t), retry.Retry, true},
		{"read deadline", readTimeoutError(t), retry.Retry, true},
		{"DNS not found", dnsNotFoundError(t), retry.Stop, false},
		{"http write timeout", httpWriteTimeoutError(t), retry.Retry, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.DefaultClassifier(tt.err)
			assert.Equal(t, tt.want, got, "DefaultClassifier(%v) = %v, want %v", tt.err, got, tt.want)

			// The loop with the default classifier agrees, and reports
			// whether the attempt may have taken effect.
			err := retry.Do(t.Context(), func(context.Context) error { return tt.err }, retry.Policy{MaxAttempts: 1})
			var rerr *retry.Error
			require.ErrorAs(t, err, &rerr)
			wantReason := retry.ErrExhausted
			if tt.want == retry.Stop {
				wantReason = retry.ErrNotRetryable
			}
			assert.Equal(t, wantReason, rerr.Reason, "Reason = %v, want %v", rerr.Reason, wantReason)
			assert.Equal(t, tt.outcomeUnknown, rerr.OutcomeUnknown,
				"OutcomeUnknown = %v, want %v for %v", rerr.OutcomeUnknown, tt.outcomeUnknown, tt.err)
			assert.Equal(t, tt.err, rerr.Last)
		})
	}
}

// TestDefaultClassifierRuleOrder puts an error matched by a later rule first
// in the tree and one matched by an earlier rule second: the earlier rule
// wins wherever its error sits.
func TestDefaultClassifierRuleOrder(t *testing.T) {
	t.Parallel()
	var (
		certErr    = untrustedCertError(t)
		dnsErr     = dnsNotFoundError(t)
		resetErr   = resetError(t)
		timeoutErr = readTimeoutError(t)
		deadline   = fmt.Errorf("attempt: %w", context.DeadlineExceeded)
		status503  = &retry.ResponseError{StatusCode: 503}
		status404  = &retry.ResponseError{StatusCode: 404}
	)
	tests := []struct {
		name string
		err  error
		want retry.Decision
	}{
		{"canceled before deadline exceeded", errors.Join(deadline, context.Canceled), retry.Stop},
		{"deadline exceeded before TLS", errors.Join(certErr, deadline), retry.Retry},
		{"deadline exceeded before 404", errors.Join(status404, deadline), retry.Retry},
		{"TLS before a net timeout", errors.Join(timeoutErr, certErr), retry.Stop},
		{"TLS before a reset", errors.Join(resetErr, certErr), retry.Stop},
		{"TLS before 503", errors.Join(status503, certErr), retry.Stop},
		{"DNS not found before 503", errors.Join(status503, dnsErr), retry.Stop},
		{"DNS not found before a net timeout", errors.Join(timeoutErr, dnsErr), retry.Stop},
		{"404 before a reset", errors.Join(resetErr, status404), retry.Stop},
		{"404 before a net timeout", errors.Join(timeoutErr, status404), retry.Stop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.DefaultClassifier(tt.err)
			assert.Equal(t, tt.want, got, "DefaultClassifier(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

// multiError is a user's error type with several causes.
type multiError []error

func (m multiError) Error() string   { return fmt.Sprintf("%d errors", len(m)) }
func (m multiError) Unwrap() []error { return m }

func opError(errno syscall.Errno) error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
}

func TestDefaultClassifier(t *testing.T) {
	t.Parallel()
	plain := errors.New("something else")
	tests := []struct {
		name string
		err  error
		want retry.Decision
	}{
		{"nil", nil, retry.Undecided},
		{"plain", plain, retry.Undecided},
		{"plain wrapped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", plain)), retry.Undecided},
		{"io.EOF", io.EOF, retry.Undecided},

		{"canceled", context.Canceled, retry.Stop},
		{"canceled wrapped", fmt.Errorf("fetch: %w", context.Canceled), retry.Stop},
		{"deadline exceeded", context.DeadlineExceeded, retry.Retry},
		{"deadline exceeded wrapped", fmt.Errorf("fetch: %w", context.DeadlineExceeded), retry.Retry},

		{"unknown authority", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, retry.Stop},
		{"wrong host", fmt.Errorf("dial: %w", x509.HostnameError{Host: "x"}), retry.Stop},
		{"expired", &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, retry.Stop},
		{"no system roots", x509.SystemRootsError{}, retry.Stop},
		{"TLS alert", fmt.Errorf("quic: %w", tls.AlertError(42)), retry.Stop},
		{"scheme mismatch", &url.Error{Op: "Get", URL: "https://x", Err: http.ErrSchemeMismatch}, retry.Stop},

		{"DNS not found", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, retry.Stop},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, retry.Retry},
		{"DNS server failure", &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}, retry.Undecided},

		{"ECONNRESET", opError(syscall.ECONNRESET), retry.Retry},
		{"ECONNREFUSED", opError(syscall.ECONNREFUSED), retry.Retry},
		{"EPIPE", fmt.Errorf("write: %w", opError(syscall.EPIPE)), retry.Retry},
		{"ECONNABORTED", opError(syscall.ECONNABORTED), retry.Retry},
		{"ETIMEDOUT", opError(syscall.ETIMEDOUT), retry.Retry},
		{"other errno", opError(syscall.EACCES), retry.Undecided},
		{"unexpected EOF wrapped", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), retry.Retry},
		{"os deadline", os.ErrDeadlineExceeded, retry.Retry},
		{"net.Error, no timeout", &net.OpError{Op: "dial", Net: "tcp", Err: plain}, retry.Undecided},
		{"timeout under a net.Error that says no",
			&url.Error{Op: "Get", URL: "http://x", Err: fmt.Errorf("broken: %w", &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded})},
			retry.Retry},

		{"join: second matches", errors.Join(plain, opError(syscall.ECONNRESET)), retry.Retry},
		{"nested join", errors.Join(plain, fmt.Errorf("w: %w", errors.Join(plain, &retry.ResponseError{StatusCode: 404}))), retry.Stop},
		{"join of unknowns", errors.Join(plain, io.EOF), retry.Undecided},
		{"Unwrap []error", multiError{plain, context.Canceled}, retry.Stop},
		{"Unwrap []error with nil", multiError{nil, &retry.ResponseError{StatusCode: 503}}, retry.Retry},
		{"Unwrap []error empty", multiError{}, retry.Undecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.DefaultClassifier(tt.err)
			assert.Equal(t, tt.want, got, "DefaultClassifier(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

func TestDefaultClassifierHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		want   retry.Decision
	}{
		{"408", 408, retry.Retry},
		{"429", 429, retry.Retry},
		{"500", 500, retry.Retry},
		{"502", 502, retry.Retry},
		{"503", 503, retry.Retry},
		{"504", 504, retry.Retry},
		{"400", 400, retry.Stop},
		{"401", 401, retry.Stop},
		{"403", 403, retry.Stop},
		{"404", 404, retry.Stop},
		{"409", 409, retry.Stop},
		{"422", 422, retry.Stop},
		{"501", 501, retry.Stop},
		{"505", 505, retry.Undecided},
		{"507", 507, retry.Undecided},
		{"0", 0, retry.Stop},
		{"99", 99, retry.Stop},
		{"600", 600, retry.Stop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re := &retry.ResponseError{StatusCode: tt.status}
			got := retry.DefaultClassifier(re)
			assert.Equal(t, tt.want, got, "DefaultClassifier(status %d) = %v, want %v", tt.status, got, tt.want)
			got = retry.DefaultClassifier(fmt.Errorf("GET /: %w", re))
			assert.Equal(t, tt.want, got, "DefaultClassifier(wrapped status %d) = %v, want %v", tt.status, got, tt.want)
		})
	}
}

// TestDefaultClassifierIgnoresMarkers pins the documented split: the loop
// applies Permanent and Transient; DefaultClassifier on its own does not.
func TestDefaultClassifierIgnoresMarkers(t *testing.T) {
	t.Parallel()
	status503 := &retry.ResponseError{StatusCode: 503}
	got := retry.DefaultClassifier(retry.Permanent(status503))
	assert.Equal(t, retry.Retry, got, "DefaultClassifier(Permanent(503)) = %v, want retry", got)
	got = retry.DefaultClassifier(retry.Transient(errors.New("x")))
	assert.Equal(t, retry.Undecided, got, "DefaultClassifier(Transient(x)) = %v, want unknown", got)
}

// TestDefaultClassifierDoesNotAllocate runs without t.Parallel, since
// AllocsPerRun counts every allocation in the process. It averages over many
// runs and rounds down, so a stray allocation by a goroutine that the real
// errors' servers left behind cannot fail it, while one allocation per call
// would.
func TestDefaultClassifierDoesNotAllocate(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain", fmt.Errorf("a: %w", errors.New("b"))},
		{"reset", resetError(t)},
		{"timeout", readTimeoutError(t)},
		{"certificate", untrustedCertError(t)},
		{"DNS not found", dnsNotFoundError(t)},
		{"status 503", fmt.Errorf("GET: %w", &retry.ResponseError{StatusCode: 503})},
		{"canceled", fmt.Errorf("a: %w", context.Canceled)},
		{"join tree", errors.Join(errors.New("a"), multiError{io.EOF, opError(syscall.EPIPE)})},
		{"hidden timeout", httpWriteTimeoutError(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d retry.Decision
			allocs := testing.AllocsPerRun(1000, func() { d = retry.DefaultClassifier(tt.err) })
			assert.Zero(t, allocs, "DefaultClassifier(%v) allocates %v times, want 0", tt.err, allocs)
			assert.Equal(t, retry.DefaultClassifier(tt.err), d)
		})
	}
}

func BenchmarkDefaultClassifier(b *testing.B) {
	benchmarks := []struct {
		name string
		err  error
		want retry.Decision
	}{
		// A reset connection as a client wraps it: the common retryable case.
		{"reset", fmt.Errorf("fetch: %w", opError(syscall.ECONNRESET)), retry.Retry},
		// No rule matches, so every rule walks the whole tree: the slowest case.
		{"unclassified", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.New("c"))), retry.Undecided},
		{"status", fmt.Errorf("GET: %w", &retry.ResponseError{StatusCode: 503}), retry.Retry},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := retry.DefaultClassifier(bm.err); d != bm.want {
					b.Fatalf("DefaultClassifier(%v) = %v, want %v", bm.err, d, bm.want)
				}
			}
		})
	}
}

// Classifiers.

func always(d retry.Decision) retry.Classifier { return func(error) retry.Decision { return d } }

func TestClassifiers(t *testing.T) {
	t.Parallel()
	unknown, retryC, stop := always(retry.Undecided), always(retry.Retry), always(retry.Stop)
	tests := []struct {
		name string
		cs   []retry.Classifier
		want retry.Decision
	}{
		{"none", nil, retry.Undecided},
		{"only nil", []retry.Classifier{nil, nil}, retry.Undecided},
		{"all unknown", []retry.Classifier{unknown, unknown}, retry.Undecided},
		{"first opinion wins: retry", []retry.Classifier{unknown, retryC, stop}, retry.Retry},
		{"first opinion wins: stop", []retry.Classifier{stop, retryC}, retry.Stop},
		{"nil skipped", []retry.Classifier{nil, unknown, nil, stop}, retry.Stop},
		{"nested", []retry.Classifier{retry.Classifiers(unknown, nil), retry.Classifiers(retryC)}, retry.Retry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := retry.Classifiers(tt.cs...)
			require.NotNil(t, c)
			got := c(errors.New("x"))
			assert.Equal(t, tt.want, got, "Classifiers(...)(x) = %v, want %v", got, tt.want)
		})
	}
}

func TestClassifiersAsksInOrderAndStopsAtFirstOpinion(t *testing.T) {
	t.Parallel()
	input := errors.New("x")
	var asked []string
	record := func(name string, d retry.Decision) retry.Classifier {
		return func(err error) retry.Decision {
			assert.Same(t, input, err, "%s got another error", name)
			asked = append(asked, name)
			return d
		}
	}
	c := retry.Classifiers(record("a", retry.Undecided), record("b", retry.Stop), record("c", retry.Retry))
	got := c(input)
	assert.Equal(t, retry.Stop, got, "Classifiers(a, b, c)(x) = %v, want stop", got)
	assert.Equal(t, []string{"a", "b"}, asked)
}

func TestClassifiersCopiesItsList(t *testing.T) {
	t.Parallel()
	cs := []retry.Classifier{always(retry.Undecided), always(retry.Retry)}
	c := retry.Classifiers(cs...)
	cs[0], cs[1] = always(retry.Stop), always(retry.Stop)
	got := c(errors.New("x"))
	assert.Equal(t, retry.Retry, got, "after the caller changed its slice: Classifiers(...)(x) = %v, want retry", got)
}

func TestClassifiersBuildsOnDefault(t *testing.T) {
	t.Parallel()
	errMine := errors.New("mine")
	mine := func(err error) retry.Decision {
		if errors.Is(err, errMine) {
			return retry.Retry
		}
		return retry.Undecided
	}
	strict := retry.Classifiers(mine, retry.DefaultClassifier, always(retry.Stop))
	tests := []struct {
		name string
		err  error
		want retry.Decision
	}{
		{"mine", fmt.Errorf("w: %w", errMine), retry.Retry},
		{"default rule", &retry.ResponseError{StatusCode: 503}, retry.Retry},
		{"default stop", &retry.ResponseError{StatusCode: 404}, retry.Stop},
		{"strict tail", errors.New("other"), retry.Stop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strict(tt.err)
			assert.Equal(t, tt.want, got, "strict(%v) = %v, want %v", tt.err, got, tt.want)
		})
	}
}

// Permanent and Transient.

func TestMarkersOfNilAreNil(t *testing.T) {
	t.Parallel()
	if got := retry.Permanent(nil); got != nil {
		t.Errorf("Permanent(nil) = %#v, want nil", got)
	}
	if got := retry.Transient(nil); got != nil {
		t.Errorf("Transient(nil) = %#v, want nil", got)
	}
}

var markers = []struct {
	name string
	mark func(error) error
}{
	{"Permanent", retry.Permanent},
	{"Transient", retry.Transient},
}

func TestMarkersKeepTheError(t *testing.T) {
	t.Parallel()
	for _, m := range markers {
		t.Run(m.name, func(t *testing.T) {
			inner := &retry.ResponseError{StatusCode: 404, Status: "404 Not Found"}
			marked := m.mark(inner)
			require.Error(t, marked)
			assert.ErrorIs(t, marked, inner)
			var re *retry.ResponseError
			require.ErrorAs(t, marked, &re)
			assert.Same(t, inner, re)
			assert.Equal(t, inner.Error(), marked.Error(), "%s(e).Error() = %q, want %q", m.name, marked.Error(), inner.Error())
			wrapped := fmt.Errorf("get: %w", marked)
			assert.Equal(t, "get: "+inner.Error(), wrapped.Error())
			assert.ErrorIs(t, wrapped, inner)
		})
	}
}

// next asks retry.Next whether the loop would retry err under p.
func next(p retry.Policy, err error) retry.Decision {
	p.Backoff = retry.Constant(0)
	p.MaxAttempts = 2
	_, stop := retry.Next(p, 1, 0, err, time.Time{}, time.Time{}, 0)
	switch {
	case stop == nil:
		return retry.Retry
	case errors.Is(stop, retry.ErrNotRetryable):
		return retry.Stop
	}
	return retry.Undecided
}

func TestMarkersOutermostWins(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	tests := []struct {
		name string
		err  error
		want retry.Decision
	}{
		{"Permanent", retry.Permanent(inner), retry.Stop},
		{"Transient", retry.Transient(inner), retry.Retry},
		{"Permanent(Transient)", retry.Permanent(retry.Transient(inner)), retry.Stop},
		{"Transient(Permanent)", retry.Transient(retry.Permanent(inner)), retry.Retry},
		{"wrapped Transient(Permanent)", fmt.Errorf("x: %w", retry.Transient(retry.Permanent(inner))), retry.Retry},
		{"wrapped Permanent(Transient)", fmt.Errorf("x: %w", retry.Permanent(retry.Transient(inner))), retry.Stop},
		{"Permanent(wrapped Transient)", retry.Permanent(fmt.Errorf("x: %w", retry.Transient(inner))), retry.Stop},
		{"join: first marker", errors.Join(inner, retry.Transient(inner), retry.Permanent(inner)), retry.Retry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The classifier always says the opposite of the wanted
			// decision, so only a marker can give it.
			classifier := always(retry.Stop)
			if tt.want == retry.Stop {
				classifier = always(retry.Retry)
			}
			got := next(retry.Policy{Classifier: classifier}, tt.err)
			assert.Equal(t, tt.want, got, "loop decision for %s = %v, want %v", tt.name, got, tt.want)
		})
	}
}

func TestMarkersOverrideTheClassifier(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	tests := []struct {
		name   string
		policy retry.Policy
		err    error
		want   retry.Decision
	}{
		{"Permanent over Retry", retry.Policy{Classifier: always(retry.Retry)}, retry.Permanent(inner), retry.Stop},
		{"Permanent over Undecided", retry.Policy{Classifier: always(retry.Undecided)}, retry.Permanent(inner), retry.Stop},
		{"Transient over Stop", retry.Policy{Classifier: always(retry.Stop)}, retry.Transient(inner), retry.Retry},
		{"Permanent over default 503", retry.Policy{}, retry.Permanent(&retry.ResponseError{StatusCode: 503}), retry.Stop},
		{"Transient over default 404", retry.Policy{}, retry.Transient(&retry.ResponseError{StatusCode: 404}), retry.Retry},
		{"Transient over default canceled", retry.Policy{}, retry.Transient(context.Canceled), retry.Retry},
		// Without a marker the classifier decides, so the rows above test the markers.
		{"control: Stop", retry.Policy{Classifier: always(retry.Stop)}, inner, retry.Stop},
		{"control: default 404", retry.Policy{}, &retry.ResponseError{StatusCode: 404}, retry.Stop},
		{"control: Undecided retries", retry.Policy{Classifier: always(retry.Undecided)}, inner, retry.Retry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := next(tt.policy, tt.err)
			assert.Equal(t, tt.want, got, "loop decision for %v = %v, want %v", tt.err, got, tt.want)
		})
	}
}

func TestDoPermanentStopsAfterOneAttempt(t *testing.T) {
	t.Parallel()
	inner := errors.New("bad request")
	calls := 0
	err := retry.Do(t.Context(), func(context.Context) error {
		calls++
		return retry.Permanent(inner)
	}, retry.Policy{Backoff: retry.Constant(0), MaxAttempts: 3, Classifier: always(retry.Retry)})
	assert.Equal(t, 1, calls, "calls = %d, want 1", calls)
	assert.ErrorIs(t, err, retry.ErrNotRetryable)
	assert.ErrorIs(t, err, inner)
	var rerr *retry.Error
	require.ErrorAs(t, err, &rerr)
	assert.Same(t, inner, rerr.Last, "Last = %#v, want the unmarked error", rerr.Last)
	assert.Equal(t, 1, rerr.Attempts)
}

func TestDoTransientRetriesWhatTheClassifierStops(t *testing.T) {
	t.Parallel()
	inner := errors.New("flaky")
	policy := retry.Policy{Backoff: retry.Constant(0), MaxAttempts: 3, Classifier: always(retry.Stop)}
	tests := []struct {
		name       string
		policy     retry.Policy
		err        error
		wantCalls  int
		wantReason error
	}{
		{"Transient", policy, retry.Transient(inner), 3, retry.ErrExhausted},
		{"Transient(Transient)", policy, retry.Transient(retry.Transient(inner)), 3, retry.ErrExhausted},
		{"control: unmarked", policy, inner, 1, retry.ErrNotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := retry.Do(t.Context(), func(context.Context) error { calls++; return tt.err }, tt.policy)
			assert.Equal(t, tt.wantCalls, calls, "calls = %d, want %d", calls, tt.wantCalls)
			assert.ErrorIs(t, err, tt.wantReason)
			var rerr *retry.Error
			require.ErrorAs(t, err, &rerr)
			assert.Same(t, inner, rerr.Last, "Last = %#v, want the unmarked error", rerr.Last)
		})
	}
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	var zero retry.Decision
	assert.Equal(t, retry.Undecided, zero, "the zero Decision is Undecided")
	tests := []struct {
		name string
		d    retry.Decision
		want string
	}{
		{"undecided", retry.Undecided, "unknown"},
		{"retry", retry.Retry, "retry"},
		{"stop", retry.Stop, "stop"},
		{"out of range", retry.Decision(7), "unknown"},
		{"negative", retry.Decision(-1), "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.d.String()
			assert.Equal(t, tt.want, got, "Decision(%d).String() = %q, want %q", int(tt.d), got, tt.want)
		})
	}
}

// claimsCanceled is an error whose Is method says it is context.Canceled, as
// errors.Is allows.
type claimsCanceled struct{}

func (claimsCanceled) Error() string        { return "shutting down" }
func (claimsCanceled) Is(target error) bool { return target == context.Canceled }

func TestDefaultClassifierHonoursIsMethods(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("worker: %w", claimsCanceled{})
	require.ErrorIs(t, err, context.Canceled, "precondition")
	got := retry.DefaultClassifier(err)
	assert.Equal(t, retry.Stop, got, "DefaultClassifier(%v) = %v, want stop", err, got)
	got = retry.DefaultClassifier(fmt.Errorf("attempt: %w", retry.ErrNoTimeLeft))
	assert.Equal(t, retry.Retry, got, "ErrNoTimeLeft is a DeadlineExceeded through its Is method")
}
