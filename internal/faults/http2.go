package faults

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
)

// The HTTP/2 server speaks just enough of RFC 9113 for a client to send it
// requests over prior-knowledge cleartext HTTP/2 (h2c): it reads the
// connection preface, exchanges SETTINGS, notes each request when its
// stream's END_STREAM arrives, and then answers, resets or goes away as its
// plan says. It does not decode HPACK: the only header block it writes is
// the single static-table byte for ":status: 200".

// ErrCode is an HTTP/2 error code (RFC 9113, section 7).
type ErrCode uint32

// The error codes the tests use.
const (
	NoError       ErrCode = 0x0
	ProtocolError ErrCode = 0x1
	InternalError ErrCode = 0x2
	RefusedStream ErrCode = 0x7
	Cancel        ErrCode = 0x8
)

// H2Kind is the kind of thing an HTTP/2 fault server does with a request.
type H2Kind int8

const (
	// H2OK answers :status 200 with no body.
	H2OK H2Kind = iota
	// H2Reset resets the stream (RST_STREAM) with Code after reading the
	// whole request; the connection stays open.
	H2Reset
	// H2GoAwayCovering sends GOAWAY whose last stream ID is the request's
	// own, with Code, then closes the connection: the server admits it may
	// have processed the request.
	H2GoAwayCovering
	// H2GoAwayNotCovering sends GOAWAY whose last stream ID is below the
	// request's, with Code, then closes the connection: the server declares
	// that it did not process the request.
	H2GoAwayNotCovering
	// H2Close closes the connection (a FIN) after reading the request,
	// with no frame at all.
	H2Close
	// H2Malformed answers with a HEADERS frame whose header block cannot
	// be decoded (an HPACK index of 0), a connection error for the client.
	H2Malformed
)

// H2 is what an HTTP/2 fault server does with one request.
type H2 struct {
	Kind H2Kind
	Code ErrCode // of the RST_STREAM or GOAWAY
}

// HTTP2 starts a cleartext HTTP/2 server (prior knowledge, no upgrade) on a
// loopback port whose n-th request (0-based, across all connections) gets
// plan[n]; the last action repeats. A client reaches it through an
// [http.Transport] whose Protocols has only UnencryptedHTTP2 set. Close it
// when done.
func HTTP2(plan ...H2) *Server {
	return newHTTP2(plan).listen()
}

// PipeHTTP2 is [HTTP2] over net.Pipe instead of TCP, for tests inside a
// testing/synctest bubble, where no real network may be used: set its
// DialContext as the transport's. It listens on nothing.
func PipeHTTP2(plan ...H2) *Server {
	return newHTTP2(plan)
}

func newHTTP2(plan []H2) *Server {
	if len(plan) == 0 {
		plan = []H2{{Kind: H2OK}}
	}
	return newServer(func(s *Server, c net.Conn, conn int) {
		serveHTTP2(s, c, conn, plan)
	})
}

// Frame types and flags (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	statusOK = 0x88 // HPACK: indexed field 8 of the static table, ":status: 200"
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frame encodes one frame.
func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream&0x7fffffff)
	return append(b, payload...)
}

func serveHTTP2(s *Server, c net.Conn, conn int, plan []H2) {
	// A writer goroutine sends the frames, so that the reader never blocks
	// on a write: over net.Pipe a write waits for the client to read, and the
	// client writes its preface and SETTINGS before it starts reading.
	out := make(chan func(), 64)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for f := range out {
			f()
		}
	}()
	defer func() {
		close(out)
		<-wrote
	}()
	send := func(b []byte) { out <- func() { c.Write(b) } }
	hangUp := func() {
		out <- func() {
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite() // the reader drains until the client closes too
			} else {
				c.Close()
			}
		}
	}

	br := bufio.NewReader(c)
	preface := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != clientPreface {
		return
	}
	send(frame(frameSettings, 0, 0, nil))

	type stream struct{ headersDone, ended bool }
	streams := make(map[uint32]*stream)
	var hdr [9]byte
	done := false // after a GOAWAY or a close: read on only to drain
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		id := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, length)
		if _, err := io.ReadFull(br, payload); err != nil {
			return
		}
		if done {
			continue
		}

		var st *stream
		switch typ {
		case frameSettings:
			if flags&flagAck == 0 {
				send(frame(frameSettings, flagAck, 0, nil))
			}
			continue
		case framePing:
			if flags&flagAck == 0 {
				send(frame(framePing, flagAck, 0, payload))
			}
			continue
		case frameHeaders:
			st = &stream{headersDone: flags&flagEndHeaders != 0, ended: flags&flagEndStream != 0}
			streams[id] = st
		case frameContinuation, frameData:
			if st = streams[id]; st == nil {
				continue
			}
			if typ == frameContinuation && flags&flagEndHeaders != 0 {
				st.headersDone = true
			}
			if typ == frameData && flags&flagEndStream != 0 {
				st.ended = true
			}
		default: // WINDOW_UPDATE, PRIORITY, RST_STREAM, GOAWAY from the client
			continue
		}
		if !st.headersDone || !st.ended {
			continue
		}
		delete(streams, id)

		a := pick(plan, s.record(Request{Conn: conn, Stream: id}))
		code := binary.BigEndian.AppendUint32(nil, uint32(a.Code))
		switch a.Kind {
		case H2OK:
			send(frame(frameHeaders, flagEndHeaders|flagEndStream, id, []byte{statusOK}))
		case H2Reset:
			send(frame(frameRSTStream, 0, id, code))
		case H2GoAwayCovering, H2GoAwayNotCovering:
			last := id
			if a.Kind == H2GoAwayNotCovering {
				last = id - 2 // the client's previous stream (IDs are odd), or 0 for the first
				if id < 2 {
					last = 0
				}
			}
			send(frame(frameGoAway, 0, 0, append(binary.BigEndian.AppendUint32(nil, last), code...)))
			hangUp()
			done = true
		case H2Close:
			hangUp()
			done = true
		case H2Malformed:
			send(frame(frameHeaders, flagEndHeaders|flagEndStream, id, []byte{0x80}))
		}
	}
}
