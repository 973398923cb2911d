// Package faults holds HTTP servers that misbehave on purpose, at chosen
// moments, over real connections: raw TCP on loopback for HTTP/1, and
// HTTP/2 frames written by hand (so that no dependency outside the standard
// library is needed) over loopback TCP or, inside a testing/synctest bubble,
// over net.Pipe. Tests use them to check what a client reports when a server
// closes, resets, refuses or half-answers a request it may or may not have
// acted on.
//
// Each server keeps a record of what it really saw: the connections it
// accepted and every request it read in full, so that a test can compare
// what the client reports with what happened.
package faults

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// Request is a request a server read in full.
type Request struct {
	Conn   int    // 0-based index of the connection it came on, in accept order
	Stream uint32 // its HTTP/2 stream ID; 0 for HTTP/1
	Method string // its method (HTTP/1 only: HTTP/2 headers are not decoded)
	Path   string // its path (HTTP/1 only)
}

// Server is a fault server. Its zero value is not usable: make one with
// [HTTP1], [HTTP2] or [PipeHTTP2]. Its methods are safe for concurrent use.
type Server struct {
	serve func(s *Server, c net.Conn, conn int)
	ln    net.Listener // nil for a pipe server

	mu     sync.Mutex
	conns  int
	open   map[net.Conn]struct{}
	seen   []Request
	turns  int
	closed bool
	wg     sync.WaitGroup
}

func newServer(serve func(*Server, net.Conn, int)) *Server {
	return &Server{serve: serve, open: make(map[net.Conn]struct{})}
}

// listen starts accepting connections on a loopback port.
func (s *Server) listen() *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("faults: listen on loopback: " + err.Error())
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.start(c)
		}
	}()
	return s
}

// start serves c on its own goroutine, unless the server is closed.
func (s *Server) start(c net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	n := s.conns
	s.conns++
	s.open[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
			c.Close()
		}()
		s.serve(s, c, n)
	}()
}

// URL returns the server's base URL, "http://127.0.0.1:port"; a pipe
// server answers any host, so its URL is "http://faults.test".
func (s *Server) URL() string {
	if s.ln == nil {
		return "http://faults.test"
	}
	return "http://" + s.ln.Addr().String()
}

// DialContext has the signature of [net.Dialer.DialContext]: set it as an
// [http.Transport]'s DialContext to reach a pipe server. Each call makes a
// net.Pipe and serves its far end on a new goroutine, which belongs to the
// caller's synctest bubble if there is one. For a loopback server it dials
// the server's port, whatever address it is given.
func (s *Server) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	if s.ln != nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", s.ln.Addr().String())
	}
	client, server := net.Pipe()
	s.start(server)
	return client, nil
}

// Conns returns how many connections the server has accepted.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Requests returns the requests the server has read in full, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Close stops the server: it stops accepting, closes every connection and
// waits for their goroutines to end.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	s.wg.Wait()
}

// record notes a request read in full and returns its 0-based turn, which
// picks the action from the server's plan.
func (s *Server) record(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, r)
	n := s.turns
	s.turns++
	return n
}

// turn takes a turn without recording a request, for a fault that strikes
// before the request is read.
func (s *Server) turn() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.turns
	s.turns++
	return n
}

// peek returns the action of the next turn without taking it.
func (s *Server) peek() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turns
}

// pick returns plan's action for turn n: the last action repeats.
func pick[A any](plan []A, n int) A {
	return plan[min(n, len(plan)-1)]
}

// drainAndClose half-closes c (a FIN) and reads until the client closes its
// end or a second passes, so that no unread byte turns the final close into
// a reset (Linux resets a connection closed with unread data).
func drainAndClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close() // a pipe has no half-close
		return
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	c.Close()
}

// reset closes c with a TCP reset (SO_LINGER 0) instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Closed returns a server whose port was open and is now closed, so that a
// connection to it is refused: it accepts nothing.
func Closed() *Server {
	s := newServer(func(*Server, net.Conn, int) {}).listen()
	s.ln.Close()
	s.wg.Wait()
	return s
}

// Silent returns a server that accepts connections, reads whatever comes
// and never writes a byte: a TLS client waits for the handshake forever.
func Silent() *Server {
	return newServer(func(_ *Server, c net.Conn, _ int) { io.Copy(io.Discard, c) }).listen()
}
