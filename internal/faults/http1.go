package faults

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// H1 is what an HTTP/1 fault server does on one turn: with one request.
type H1 int8

const (
	// H1OK reads the request and answers 200 with the body "ok", keeping
	// the connection open for the next request.
	H1OK H1 = iota
	// H1Unavailable reads the request and answers 503 with the body "busy",
	// keeping the connection open.
	H1Unavailable
	// H1CloseAfterRequest reads the whole request, then closes the
	// connection (a FIN) without answering: the server may have acted on it.
	H1CloseAfterRequest
	// H1ResetAfterRequest reads the whole request, then resets the
	// connection (SO_LINGER 0, so a RST instead of a FIN).
	H1ResetAfterRequest
	// H1HalfHeader reads the whole request, writes half a status line,
	// then closes the connection (a FIN).
	H1HalfHeader
	// H1MalformedStatus reads the whole request, answers with a status
	// line whose code is not a number, then closes the connection.
	H1MalformedStatus
	// H1CloseBeforeRequest waits for the request's first bytes, then
	// closes the connection (a FIN) without reading it: the request never
	// reached the server's application. Waiting makes sure the client has
	// written it, so that the client cannot tell this from a FIN after the
	// request was read (a FIN that arrives before the client writes makes
	// net/http report "http: server closed idle connection" instead).
	H1CloseBeforeRequest
	// H1NoAnswer reads the whole request and never answers, until the
	// client closes the connection.
	H1NoAnswer
)

// HTTP1 starts an HTTP/1.1 server on a loopback port whose n-th request
// (0-based, across all connections) gets plan[n]; the last action repeats.
// Close it when done.
func HTTP1(plan ...H1) *Server {
	if len(plan) == 0 {
		plan = []H1{H1OK}
	}
	return newServer(func(s *Server, c net.Conn, conn int) {
		serveHTTP1(s, c, conn, plan)
	}).listen()
}

func serveHTTP1(s *Server, c net.Conn, conn int, plan []H1) {
	br := bufio.NewReader(c)
	for {
		// Wait for the next request before taking a turn, so that an idle
		// kept-alive connection takes none.
		if _, err := br.Peek(1); err != nil {
			return
		}
		if pick(plan, s.peek()) == H1CloseBeforeRequest {
			s.turn()
			drainAndClose(c)
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		n := s.record(Request{Conn: conn, Method: req.Method, Path: req.URL.Path})
		switch pick(plan, n) {
		case H1OK:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case H1Unavailable:
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
		case H1CloseAfterRequest:
			drainAndClose(c)
			return
		case H1ResetAfterRequest:
			reset(c)
			return
		case H1HalfHeader:
			io.WriteString(c, "HTTP/1.1 200 O")
			drainAndClose(c)
			return
		case H1NoAnswer:
			io.Copy(io.Discard, c)
			return
		case H1MalformedStatus:
			io.WriteString(c, "HTTP/1.1 two-hundred OK\r\nContent-Length: 0\r\n\r\n")
			drainAndClose(c)
			return
		}
	}
}
