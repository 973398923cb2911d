package retryhttp

import (
	"errors"
	"fmt"
	"net/http"
)

// checkRequest returns why req could never be sent over HTTP, or nil: the
// checks that net/http's Transport makes before it sends anything, made once
// before the first attempt, so that such a request is refused at once
// instead of failing the same way on every attempt. A scheme other than
// http and https is left to Base, which may have registered it; if it has
// not, the error from the one attempt is one the default classifier stops
// on.
func checkRequest(req *http.Request) error {
	if req.URL == nil {
		return errNilURL
	}
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return nil
	}
	if req.URL.Host == "" {
		return errNoHost
	}
	if req.Method != "" && !isToken(req.Method) {
		return fmt.Errorf("retryhttp: invalid method %q", req.Method)
	}
	if err := checkFields("header", req.Header); err != nil {
		return err
	}
	return checkFields("trailer", req.Trailer)
}

var (
	errNoHost = errors.New("retryhttp: no host in request URL")
	errNilURL = errors.New("retryhttp: nil Request.URL")
)

// checkFields checks header or trailer fields by RFC 9110's grammar: a name
// is a token; a value holds no control character but tab. The value itself
// stays out of the error: it may be a secret.
func checkFields(kind string, h http.Header) error {
	for name, values := range h {
		if !isToken(name) {
			return fmt.Errorf("retryhttp: invalid %s field name %q", kind, name)
		}
		for _, v := range values {
			if !isFieldValue(v) {
				return fmt.Errorf("retryhttp: invalid %s field value for %q", kind, name)
			}
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token: one or more tchars.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// isFieldValue reports whether s may be sent as a field value: no control
// character other than horizontal tab, and no DEL. Bytes above 0x7f
// (obs-text) are allowed, as net/http allows them.
func isFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// tchar holds RFC 9110's tchar: "!" / "#" / "$" / "%" / "&" / "'" / "*" /
// "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
