package retrygrpc

import (
	"math"
	"time"

	"google.golang.org/grpc/metadata"
)

// pushbackKey is the trailer in which a server asks the client to wait
// before retrying, or not to retry at all (gRFC A6, "Pushback").
const pushbackKey = "grpc-retry-pushback-ms"

// pushback is what a response's trailer says about retrying it.
type pushback int8

const (
	noPushback pushback = iota // no grpc-retry-pushback-ms: the policy decides
	pushedBack                 // a delay of 0 or more: retry no earlier than that
	refused                    // negative or malformed: the server says do not retry
)

// parsePushback reads the grpc-retry-pushback-ms trailer. A6 defines its
// value as a signed 32-bit integer in ASCII, and says a negative or
// unparseable value asks the client not to retry at all. So exactly one value
// of ASCII digits, with an optional leading '-', that fits in an int32 gives
// a delay (0 or more) or, if negative, a refusal; anything else (an empty
// value, a '+' sign, spaces, a fraction, a number outside int32, or several
// values, as grpc-go also reads them) is a refusal. Leading zeros are
// accepted, as grpc-go, grpc-java and grpc-core read them. The delay is never
// negative and never above math.MaxInt32 milliseconds (about 24.9 days).
func parsePushback(md metadata.MD) (time.Duration, pushback) {
	values := md[pushbackKey]
	switch len(values) {
	case 0:
		return 0, noPushback
	case 1:
		ms, ok := parseMillis(values[0])
		if !ok || ms < 0 {
			return 0, refused
		}
		return time.Duration(ms) * time.Millisecond, pushedBack
	}
	return 0, refused
}

// parseMillis parses an optional '-' followed by ASCII digits into an int32.
func parseMillis(s string) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > math.MaxInt32+1 { // -2^31 is the one value one past MaxInt32
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	if n > math.MaxInt32 {
		return 0, false
	}
	return n, true
}
