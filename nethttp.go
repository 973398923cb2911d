package retry

import (
	"fmt"
	"io"
	"reflect"
	"strings"
)

// This file reads what net/http's own errors say about whether a request
// reached the server. Several of them are unexported (the HTTP/2 stream
// reset, GOAWAY and connection errors, the TLS handshake timeout), and some
// are plain text made with errors.New or fmt.Errorf; they are recognised
// here without allocating, as the rest of the walk is:
//
//   - by type name and package, through reflect, for the unexported types:
//     net/http's http2StreamError, http2GoAwayError, http2ConnectionError
//     and tlsHandshakeTimeoutError, and golang.org/x/net/http2's exported
//     StreamError, GoAwayError and ConnectionError, which net/http's are
//     bundled copies of. The stream error's code is read as its second
//     field: net/http's StreamError.As method, which lets errors.As fill an
//     x/net/http2.StreamError, matches fields by position and name, so
//     that layout is held in place by that compatibility;
//   - by text, for the few *errors.errorString and *fmt.wrapError values
//     whose words carry the answer. Their Error method returns a stored
//     string, so reading it costs nothing.
//
// The risk is a rename in a later Go release: the error would then fall
// through to the general rules (a bare io.EOF, an unexpected EOF, a timeout
// still count as unknown), and the fault tests, which run against real
// servers on every supported Go release, would fail and say so.

// wrapError is the type of fmt.Errorf's errors with one %w; errorString,
// errors.New's, is in classify.go.
var wrapError = reflect.TypeOf(fmt.Errorf("%w", io.EOF))

// The texts net/http gives to its plain-text errors, as in Go 1.25 and 1.26.
const (
	// HTTP/1: the server closed a kept-alive connection before the request
	// was written to it.
	textClosedIdle = "http: server closed idle connection"
	// HTTP/1: the request was written, then the connection broke (what
	// follows is why: a malformed response, an unexpected EOF, ...).
	textConnBroken = "net/http: HTTP/1.x transport connection broken: "
	// HTTP/2: a GOAWAY whose last stream ID is below the request's stream,
	// with NO_ERROR. net/http resends the request on a new connection
	// itself, so this comes back inside the "cannot retry" error below
	// when the body cannot be replayed, or from an x/net/http2 Transport
	// when its 7 retries run out ...
	textGotGoAway = "http2: Transport received Server's graceful shutdown GOAWAY"
	// ... or with an error code, on a connection's first stream, which
	// net/http does not retry.
	textGoAwayCode = "http2: Transport received GOAWAY from server ErrCode:"
	// HTTP/2: the connection cannot take the request.
	textConnUnusable = "http2: client conn not usable"
	// HTTP/2: net/http would have retried a stream refused or not processed
	// (the text in brackets says which), but the body cannot be replayed.
	textCannotRetry = "http2: Transport: cannot retry err ["
)

// http2RefusedStream is REFUSED_STREAM (RFC 9113, section 7): the server
// did not process the stream.
const http2RefusedStream = 0x7

// noteHTTP records what err, one error of a tree, says about an HTTP
// request: isUnsent when it proves the server did not process the request,
// isBroken when the exchange broke after the request was sent (a stream
// reset, a GOAWAY that covered the request, a connection error), isSent
// when the request was sent and the reply was garbled, and isNoConn when no
// connection was made (a TLS handshake that timed out).
func (f *facts) noteHTTP(err error) {
	t := reflect.TypeOf(err)
	switch t {
	case errorString:
		f.noteHTTPText(err.Error())
		return
	case wrapError:
		if strings.HasPrefix(err.Error(), textConnBroken) {
			f.set |= isSent
		}
		return
	}
	if k := t.Kind(); k != reflect.Struct && k != reflect.Uint32 {
		return
	}
	var name string
	switch t.PkgPath() {
	case "net/http":
		name = t.Name()
		if name == "tlsHandshakeTimeoutError" {
			f.set |= isNoConn
			return
		}
		var ok bool
		if name, ok = strings.CutPrefix(name, "http2"); !ok {
			return
		}
	case "golang.org/x/net/http2":
		name = t.Name()
	default:
		return
	}
	switch name {
	case "StreamError":
		// A reset stream reached the server: it read the request's
		// headers at least. Only REFUSED_STREAM says it did nothing more.
		v := reflect.ValueOf(err)
		if v.Kind() != reflect.Struct || v.NumField() != 3 ||
			v.Field(0).Kind() != reflect.Uint32 || v.Field(1).Kind() != reflect.Uint32 {
			return
		}
		if v.Field(1).Uint() == http2RefusedStream {
			f.set |= isUnsent
		} else {
			f.set |= isBroken
		}
	case "GoAwayError", "ConnectionError":
		// net/http returns a GoAwayError only to the streams the GOAWAY
		// covered (it has already failed the others, with the texts
		// above), when the connection then closes. A connection error
		// ends every stream on the connection, sent or not; unknown is
		// the safe answer.
		f.set |= isBroken
	}
}

// noteHTTPText records what the text of a plain net/http error says.
func (f *facts) noteHTTPText(s string) {
	switch {
	case s == textClosedIdle, s == textGotGoAway, s == textConnUnusable, strings.HasPrefix(s, textGoAwayCode):
		f.set |= isUnsent
	case invalidRequest(s):
		f.set |= isInvalid
	case strings.HasPrefix(s, textCannotRetry):
		why := s[len(textCannotRetry):]
		if strings.HasPrefix(why, textGotGoAway) || strings.HasPrefix(why, textConnUnusable) ||
			(strings.HasPrefix(why, "stream error: ") && strings.Contains(why, "; REFUSED_STREAM")) {
			f.set |= isUnsent
		} else {
			f.set |= isSent // a PROTOCOL_ERROR from the server: it read the request
		}
	}
}
