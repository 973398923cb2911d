package retry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The plain-text errors of net/http that the fault tests cannot reach
// deterministically, with net/http's own texts and types (errors.New and
// fmt.Errorf with %w, as net/http makes them).
func TestNoteHTTPText(t *testing.T) {
	t.Parallel()
	inURL := func(err error) error { return &url.Error{Op: "Post", URL: "http://x/", Err: err} }
	tests := []struct {
		name     string
		err      error
		unknown  bool
		decision Decision
	}{
		// A FIN that arrives on a kept-alive connection before the request is written.
		{"server closed idle connection", inURL(errors.New("http: server closed idle connection")), false, Retry},
		{"HTTP/2 conn not usable", errors.New("http2: client conn not usable"), false, Retry},
		{"graceful GOAWAY, retries spent", errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), false, Retry},
		{"GOAWAY with a code", errors.New("http2: Transport received GOAWAY from server ErrCode:ENHANCE_YOUR_CALM"), false, Retry},
		{"cannot retry a refused stream", errors.New("http2: Transport: cannot retry err [stream error: stream ID 3; REFUSED_STREAM] after Request.Body was written; define Request.GetBody to avoid this error"), false, Retry},
		{"cannot retry an unusable conn", errors.New("http2: Transport: cannot retry err [http2: client conn not usable] after Request.Body was written; define Request.GetBody to avoid this error"), false, Retry},
		// net/http retries a PROTOCOL_ERROR from the server, which read the request.
		{"cannot retry a PROTOCOL_ERROR", errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; PROTOCOL_ERROR; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), true, Undecided},
		{"connection broken, malformed header", fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", errors.New(`malformed MIME header line: x`)), true, Undecided},
		{"connection broken inside another wrapper", fmt.Errorf("send: %w", fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", errors.New("x"))), true, Undecided},
		{"same words, not net/http's type", &textError{"http: server closed idle connection"}, false, Undecided},
		{"same words inside more text", errors.New("proxy: http: server closed idle connection"), false, Undecided},
		{"a plain text error", errors.New("boom"), false, Undecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.unknown, OutcomeUnknown(tt.err), "OutcomeUnknown(%v)", tt.err)
			assert.Equal(t, tt.decision, DefaultClassifier(tt.err), "DefaultClassifier(%v)", tt.err)
		})
	}
}

type textError struct{ s string }

func (e *textError) Error() string { return e.s }

// FuzzNoteHTTPText: no text makes the rules panic, none makes the default
// classifier stop (the text rules only ever say retry), and a plain text
// error counts as unknown only when it is net/http's "cannot retry" one.
func FuzzNoteHTTPText(f *testing.F) {
	f.Add("http2: Transport: cannot retry err [stream error: stream ID 1; REFUSED_STREAM] after")
	f.Add("http2: Transport: cannot retry err [")
	f.Add("http2: Transport received GOAWAY from server ErrCode:")
	f.Add("net/http: HTTP/1.x transport connection broken: ")
	f.Fuzz(func(t *testing.T, s string) {
		if OutcomeUnknown(errors.New(s)) && !strings.HasPrefix(s, textCannotRetry) {
			t.Fatalf("OutcomeUnknown(errors.New(%q)) = true", s)
		}
		for _, err := range []error{errors.New(s), fmt.Errorf("%w", errors.New(s)), fmt.Errorf("%s: %w", s, errors.New(s))} {
			if d := DefaultClassifier(err); d == Stop {
				t.Fatalf("DefaultClassifier(%q) = %v", err, d)
			}
		}
	})
}
