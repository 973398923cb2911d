package retryotel_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// A transport failure has the same error.type through retryhttp as through
// retry.Do around an http.Client: the type of the error that says what
// failed, never the wrapper either adds around it (retryhttp's own, which
// carries the attempt's outcome, or the client's *url.Error).
func TestErrorTypeOfTransportFailures(t *testing.T) {
	t.Parallel()

	// A server whose certificate the client does not trust.
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are the point
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)

	// An HTTP/2 server that resets every stream.
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)

	plain := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(plain.Close)

	tests := []struct {
		name      string
		transport func() http.RoundTripper
		request   func(ctx context.Context) *http.Request
		want      string
		or        string // another answer net/http may give, racing with itself
	}{
		{
			name:      "untrusted certificate",
			transport: func() http.RoundTripper { return &http.Transport{} },
			request:   get(untrusted.URL),
			want:      "*tls.CertificateVerificationError",
		},
		{
			name:      "name not found",
			transport: func() http.RoundTripper { return &http.Transport{DialContext: nxdomainDialer(t).DialContext} },
			request:   get("http://nowhere.test/"),
			want:      "*net.DNSError",
		},
		{
			name:      "HTTP/2 stream reset",
			transport: func() http.RoundTripper { return h2.Client().Transport.(*http.Transport).Clone() },
			request:   get(h2.URL),
			want:      "net/http.http2StreamError",
		},
		{
			name:      "unsupported scheme",
			transport: func() http.RoundTripper { return &http.Transport{} },
			request:   get("ftp://127.0.0.1/"),
			want:      "*errors.errorString",
		},
		{
			name:      "body shorter than its Content-Length",
			transport: func() http.RoundTripper { return &http.Transport{} },
			request: func(ctx context.Context) *http.Request {
				req, err := http.NewRequestWithContext(ctx, http.MethodPut, plain.URL, strings.NewReader("abc"))
				require.NoError(t, err)
				req.ContentLength = 10
				return req
			},
			// net/http's own wrapper, nothingWrittenError, has its
			// cause's text too, so it is looked through as well.
			want: "*errors.errorString",
			// The transport closes the connection on the short body, and
			// its read loop, seeing that close, can report it first.
			or: "internal/poll.errNetClosing",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			policy := retry.Policy{MaxAttempts: 1}
			want := map[string]int64{"error.type=" + tt.want + ",retry.attempt.kind=original": 1}
			or := want
			if tt.or != "" {
				or = map[string]int64{"error.type=" + tt.or + ",retry.attempt.kind=original": 1}
			}
			either := func(t *testing.T, got map[string]int64, how string) {
				t.Helper()
				if !assert.ObjectsAreEqual(or, got) {
					assert.Equal(t, want, got, how)
				}
			}

			viaTransport := newTelemetry(t)
			tr := tt.transport()
			t.Cleanup(closeIdle(tr))
			client := retryhttp.NewClient(&http.Client{Transport: tr}, viaTransport.instrument(policy))
			resp, err := client.Do(tt.request(t.Context()))
			if resp != nil {
				resp.Body.Close()
			}
			require.Error(t, err)
			either(t, viaTransport.collect(t).sums(t, "retry.attempts"), "through retryhttp")

			viaClient := newTelemetry(t)
			tr = tt.transport()
			t.Cleanup(closeIdle(tr))
			plainClient := &http.Client{Transport: tr}
			err = retry.Do(t.Context(), func(ctx context.Context) error {
				resp, err := plainClient.Do(tt.request(ctx))
				if err != nil {
					return err
				}
				resp.Body.Close()
				return retry.CheckResponse(resp)
			}, viaClient.instrument(policy))
			require.Error(t, err)
			either(t, viaClient.collect(t).sums(t, "retry.attempts"), "through retry.Do around an http.Client")
		})
	}
}

func get(url string) func(context.Context) *http.Request {
	return func(ctx context.Context) *http.Request {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			panic(err)
		}
		return req
	}
}

func closeIdle(rt http.RoundTripper) func() {
	return func() { rt.(interface{ CloseIdleConnections() }).CloseIdleConnections() }
}

// nxdomainDialer returns a dialer whose resolver asks a DNS server on
// loopback that answers every query with NXDOMAIN: the name does not exist.
func nxdomainDialer(t *testing.T) *net.Dialer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if answer := nxdomain(buf[:n]); answer != nil {
				pc.WriteTo(answer, from)
			}
		}
	}()
	return &net.Dialer{Resolver: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}}
}

// nxdomain returns the answer to a DNS query that says the name does not
// exist (RFC 1035: the query's ID and question, QR and RA set, RCODE 3), or
// nil if query is not one question.
func nxdomain(query []byte) []byte {
	if len(query) < 12 || query[4] != 0 || query[5] != 1 {
		return nil
	}
	end := 12
	for end < len(query) && query[end] != 0 { // the name's labels
		end += int(query[end]) + 1
	}
	end += 1 + 4 // the root label, QTYPE and QCLASS
	if end > len(query) {
		return nil
	}
	header := []byte{query[0], query[1], 0x80 | query[2]&0x01, 0x80 | 3, 0, 1, 0, 0, 0, 0, 0, 0}
	return append(header, query[12:end]...)
}
