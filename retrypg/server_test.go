package retrypg_test

import (
	"net"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// scriptedServer is a stand-in for PostgreSQL in the examples, so that they
// run without a server: a loopback TCP server that speaks enough of the
// PostgreSQL wire protocol (through pgx's own pgproto3) for pgx to connect
// and run simple-protocol statements (those without arguments), answers
// each statement as its script says, and logs them. pgx, pgxpool and Tx run
// against it exactly as against PostgreSQL; the proofs on a real PostgreSQL
// are this package's tests.
type scriptedServer struct {
	ln     net.Listener
	script func(stmt string) answer

	mu  sync.Mutex
	log []string
}

// answer is the server's reply to one statement: its command tag, or an
// error with a SQLSTATE, or a hang-up before any reply.
type answer struct {
	tag    string
	code   string // an ErrorResponse with this SQLSTATE, if set
	hangUp bool   // close the connection without replying
}

// newScriptedServer starts a server that answers with script (nil: every
// statement succeeds) and returns it with a connection string for it.
func newScriptedServer(script func(stmt string) answer) (*scriptedServer, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s := &scriptedServer{ln: ln, script: script}
	go s.accept()
	return s, "postgres://example@" + ln.Addr().String() + "/example?sslmode=disable"
}

func (s *scriptedServer) Close() { s.ln.Close() }

// statements returns the log, one line per statement, with its answer.
func (s *scriptedServer) statements() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

func (s *scriptedServer) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(conn)
	}
}

func (s *scriptedServer) serve(conn net.Conn) {
	defer conn.Close()
	be := pgproto3.NewBackend(conn, conn)
	msg, err := be.ReceiveStartupMessage()
	if _, ssl := msg.(*pgproto3.SSLRequest); ssl && err == nil {
		if _, err := conn.Write([]byte("N")); err != nil {
			return
		}
		msg, err = be.ReceiveStartupMessage()
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok || err != nil {
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	for _, p := range [][2]string{{"server_version", "15.0"}, {"client_encoding", "UTF8"}, {"standard_conforming_strings", "on"}} {
		be.Send(&pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	status := byte('I') // idle; 'T' in a transaction, 'E' in a failed one
	be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
	if be.Flush() != nil {
		return
	}
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		q, ok := msg.(*pgproto3.Query)
		if !ok {
			return // Terminate, or what this server does not speak
		}
		stmt := strings.ToLower(strings.Fields(q.String + " ")[0])
		a := answer{tag: strings.ToUpper(stmt)}
		if s.script != nil {
			a = s.script(q.String)
		}
		s.record(q.String, a)
		if a.hangUp {
			return
		}
		switch {
		case stmt == "begin":
			status = 'T'
		case stmt == "commit" || stmt == "rollback":
			status = 'I'
		case a.code != "" && status == 'T':
			status = 'E'
		}
		if a.code != "" {
			be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: a.code, Message: "scripted error"})
		} else {
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte(a.tag)})
		}
		be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
		if be.Flush() != nil {
			return
		}
	}
}

func (s *scriptedServer) record(stmt string, a answer) {
	line := stmt
	switch {
	case a.hangUp:
		line += " -> (connection closed)"
	case a.code != "":
		line += " -> SQLSTATE " + a.code
	default:
		line += " -> " + a.tag
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, line)
}
