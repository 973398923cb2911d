package faults_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/seed93a044d1/retry/internal/faults"
)

// A server that reads the request, then closes the connection without
// answering: net/http reports a bare io.EOF, and the server's record shows
// that it did read the request.
func ExampleHTTP1() {
	s := faults.HTTP1(faults.H1CloseAfterRequest)
	defer s.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/orders", strings.NewReader("payload"))
	_, err := tr.RoundTrip(req)
	fmt.Println("client:", err)
	fmt.Printf("server: %d connection, read %+v\n", s.Conns(), s.Requests())
	// Output:
	// client: EOF
	// server: 1 connection, read [{Conn:0 Stream:0 Method:POST Path:/orders}]
}

// A cleartext HTTP/2 server that resets the stream with INTERNAL_ERROR after
// reading the request.
func ExampleHTTP2() {
	s := faults.HTTP2(faults.H2{Kind: faults.H2Reset, Code: faults.InternalError})
	defer s.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/", nil)
	_, err := tr.RoundTrip(req)
	fmt.Println("client:", err)
	fmt.Printf("server: read %+v\n", s.Requests())
	// Output:
	// client: stream error: stream ID 1; INTERNAL_ERROR; received from peer
	// server: read [{Conn:0 Stream:1 Method: Path:}]
}
