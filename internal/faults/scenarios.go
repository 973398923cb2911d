package faults

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// Scenario is one fault, what the server really does with the request, and
// what an honest client must report: the table that both paths through the
// library (retry.Do around an http.Client, and retryhttp) are tested
// against. Each attempt sends a POST with an Idempotency-Key and a
// replayable body, the request a retrying client must be most careful
// with.
type Scenario struct {
	Name string
	// Start starts the server.
	Start func() *Server
	// HTTP2 says the client speaks cleartext HTTP/2 (prior knowledge).
	HTTP2 bool
	// Pipe says the server runs over net.Pipe, so the scenario must run
	// inside a testing/synctest bubble: net/http's own HTTP/2 retries wait
	// 1+2+4+8+16+32 s before giving up, which only fake time makes quick.
	Pipe bool

	// Unknown is what the library must report as OutcomeUnknown: true when
	// the server may have processed the request, as far as the client can
	// know.
	Unknown bool
	// Decision is retry.DefaultClassifier's answer for the attempt's error,
	// as retry.Decision's String gives it; "" when the call succeeds.
	Decision string
	// Requests is how many requests the server reads in full during one
	// attempt, net/http's own silent retries included.
	Requests int
	// Conns is how many connections the server accepts during the first
	// attempt.
	Conns int
	// StreamingBody says the request's body cannot be replayed (no
	// GetBody), so neither net/http nor retryhttp sends it twice.
	StreamingBody bool
	// HTTPS says the client speaks TLS to the server.
	HTTPS bool
	// Configure, if set, adjusts the client transport (its timeouts).
	Configure func(*http.Transport)
}

// URL returns the URL of path on the scenario's server.
func (sc Scenario) URL(s *Server, path string) string {
	u := s.URL() + path
	if sc.HTTPS {
		u = "https" + strings.TrimPrefix(u, "http")
	}
	return u
}

// Transport returns a new client transport for the scenario's server:
// HTTP/1.1, or cleartext HTTP/2, dialling the server (by pipe for a pipe
// server).
func (sc Scenario) Transport(s *Server) *http.Transport {
	tr := &http.Transport{DialContext: s.DialContext}
	if sc.HTTP2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	if sc.Configure != nil {
		sc.Configure(tr)
	}
	return tr
}

// Scenarios is the table of faults.
var Scenarios = []Scenario{
	// HTTP/1.1 on raw TCP.
	{
		Name:  "HTTP/1 FIN after reading the request",
		Start: func() *Server { return HTTP1(H1CloseAfterRequest) },
		// net/http returns a bare io.EOF.
		Unknown: true, Decision: "unknown", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/1 RST after reading the request",
		Start: func() *Server { return HTTP1(H1ResetAfterRequest) },
		// ECONNRESET from the read.
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/1 half a status line, then FIN",
		Start: func() *Server { return HTTP1(H1HalfHeader) },
		// "transport connection broken: unexpected EOF"
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/1 malformed status line",
		Start: func() *Server { return HTTP1(H1MalformedStatus) },
		// "transport connection broken: malformed HTTP status code"
		Unknown: true, Decision: "unknown", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/1 FIN before reading the request",
		Start: func() *Server { return HTTP1(H1CloseBeforeRequest) },
		// The same bare io.EOF as a FIN after the request: the client
		// cannot tell them apart, so the server may have read it.
		Unknown: true, Decision: "unknown", Requests: 0, Conns: 1,
	},
	{
		Name:  "HTTP/1 connection refused",
		Start: Closed,
		// ECONNREFUSED from the dial.
		Unknown: false, Decision: "retry", Requests: 0, Conns: 0,
	},
	{
		Name:      "HTTP/1 no response within ResponseHeaderTimeout",
		Start:     func() *Server { return HTTP1(H1NoAnswer) },
		Configure: func(tr *http.Transport) { tr.ResponseHeaderTimeout = 50 * time.Millisecond },
		// *http.timeoutError "net/http: timeout awaiting response headers"
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	// Failures before any byte of the request is sent.
	{
		Name:  "dial timeout",
		Start: Closed,
		Configure: func(tr *http.Transport) {
			tr.DialContext = (&net.Dialer{Timeout: time.Nanosecond}).DialContext
		},
		// *net.OpError{Op: "dial"} holding an i/o timeout
		Unknown: false, Decision: "retry", Requests: 0, Conns: 0,
	},
	{
		Name:      "TLS handshake timeout",
		Start:     Silent,
		HTTPS:     true,
		Configure: func(tr *http.Transport) { tr.TLSHandshakeTimeout = 50 * time.Millisecond },
		// net/http's tlsHandshakeTimeoutError
		Unknown: false, Decision: "retry", Requests: 0, Conns: 1,
	},
	// Cleartext HTTP/2, frames written by hand, on loopback TCP.
	{
		Name:  "HTTP/2 RST_STREAM INTERNAL_ERROR after reading the request",
		Start: func() *Server { return HTTP2(H2{Kind: H2Reset, Code: InternalError}) },
		HTTP2: true,
		// http2StreamError{Code: INTERNAL_ERROR}
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:    "HTTP/2 RST_STREAM CANCEL after reading the request",
		Start:   func() *Server { return HTTP2(H2{Kind: H2Reset, Code: Cancel}) },
		HTTP2:   true,
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 GOAWAY covering the request, then close",
		Start: func() *Server { return HTTP2(H2{Kind: H2GoAwayCovering, Code: NoError}) },
		HTTP2: true,
		// http2GoAwayError{LastStreamID: 1}
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:    "HTTP/2 GOAWAY INTERNAL_ERROR covering the request, then close",
		Start:   func() *Server { return HTTP2(H2{Kind: H2GoAwayCovering, Code: InternalError}) },
		HTTP2:   true,
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 GOAWAY PROTOCOL_ERROR not covering the request, then close",
		Start: func() *Server { return HTTP2(H2{Kind: H2GoAwayNotCovering, Code: ProtocolError}) },
		HTTP2: true,
		// "http2: Transport received GOAWAY from server ErrCode:PROTOCOL_ERROR":
		// net/http does not retry the first stream of a connection then.
		Unknown: false, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 FIN after reading the request, no GOAWAY",
		Start: func() *Server { return HTTP2(H2{Kind: H2Close}) },
		HTTP2: true,
		// unexpected EOF
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 undecodable response headers",
		Start: func() *Server { return HTTP2(H2{Kind: H2Malformed}) },
		HTTP2: true,
		// http2ConnectionError(COMPRESSION_ERROR)
		Unknown: true, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 REFUSED_STREAM once",
		Start: func() *Server { return HTTP2(H2{Kind: H2Reset, Code: RefusedStream}, H2{Kind: H2OK}) },
		HTTP2: true,
		// net/http sends it again at once on the same connection: the
		// server reads it twice and answers the second.
		Requests: 2, Conns: 1,
	},
	{
		Name:  "HTTP/2 REFUSED_STREAM, body that cannot be replayed",
		Start: func() *Server { return HTTP2(H2{Kind: H2Reset, Code: RefusedStream}) },
		HTTP2: true, StreamingBody: true,
		// "http2: Transport: cannot retry err [stream error: stream ID 1;
		// REFUSED_STREAM; received from peer] after Request.Body was written"
		Unknown: false, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 GOAWAY not covering the request, body that cannot be replayed",
		Start: func() *Server { return HTTP2(H2{Kind: H2GoAwayNotCovering, Code: NoError}) },
		HTTP2: true, StreamingBody: true,
		// "http2: Transport: cannot retry err [http2: Transport received
		// Server's graceful shutdown GOAWAY] after Request.Body was written"
		Unknown: false, Decision: "retry", Requests: 1, Conns: 1,
	},
	{
		Name:  "HTTP/2 GOAWAY not covering the request once",
		Start: func() *Server { return HTTP2(H2{Kind: H2GoAwayNotCovering, Code: NoError}, H2{Kind: H2OK}) },
		HTTP2: true,
		// net/http sends it again at once on a new connection.
		Requests: 2, Conns: 2,
	},
	// Cleartext HTTP/2 over net.Pipe, in fake time. There is no "GOAWAY
	// not covering the request every time", nor "RST_STREAM PROTOCOL_ERROR
	// every time": net/http (1.25 and 1.26, TLS or cleartext) then opens
	// new connections in a tight loop, thousands a second, until the
	// request's context ends (golang/go#52459), so only the context's
	// error ever comes back.
	{
		Name:  "HTTP/2 REFUSED_STREAM every time",
		Start: func() *Server { return PipeHTTP2(H2{Kind: H2Reset, Code: RefusedStream}) },
		HTTP2: true, Pipe: true,
		// net/http tries 8 times in 63 s, then returns
		// http2StreamError{Code: REFUSED_STREAM}.
		Unknown: false, Decision: "retry", Requests: 8, Conns: 1,
	},
}
