package retrygrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestParsePushback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   time.Duration
		state  pushback
	}{
		{"none", nil, 0, noPushback},
		{"zero", []string{"0"}, 0, pushedBack},
		{"ms", []string{"250"}, 250 * time.Millisecond, pushedBack},
		{"leading zeros", []string{"007"}, 7 * time.Millisecond, pushedBack},
		{"minus zero", []string{"-0"}, 0, pushedBack},
		{"int32 max", []string{"2147483647"}, math.MaxInt32 * time.Millisecond, pushedBack},
		{"negative", []string{"-1"}, 0, refused},
		{"int32 min", []string{"-2147483648"}, 0, refused},
		{"beyond int32", []string{"2147483648"}, 0, refused},
		{"below int32", []string{"-2147483649"}, 0, refused},
		{"huge", []string{"99999999999999999999999"}, 0, refused},
		{"empty", []string{""}, 0, refused},
		{"minus alone", []string{"-"}, 0, refused},
		{"plus", []string{"+5"}, 0, refused},
		{"space", []string{" 5"}, 0, refused},
		{"fraction", []string{"1.5"}, 0, refused},
		{"unit", []string{"5ms"}, 0, refused},
		{"hex", []string{"0x10"}, 0, refused},
		{"two values", []string{"1", "2"}, 0, refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			for _, v := range tt.values {
				md.Append(pushbackKey, v)
			}
			got, state := parsePushback(md)
			assert.Equal(t, tt.want, got, "parsePushback(%q) delay", tt.values)
			assert.Equal(t, tt.state, state, "parsePushback(%q) state", tt.values)
		})
	}
}

// FuzzParsePushback checks the parser against strconv on any input: a delay
// exactly when the value is a decimal int32 of 0 or more (an optional '-',
// no '+'), never negative, never above MaxInt32 milliseconds, and never a
// panic.
func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "250", "-1", "", "+5", "007", "2147483647", "2147483648", "-2147483648",
		"1.5", " 1", "\x00", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, state := parsePushback(metadata.MD{pushbackKey: {s}})
		if got < 0 || got > math.MaxInt32*time.Millisecond {
			t.Fatalf("parsePushback(%q) = %v, out of range", s, got)
		}
		n, err := strconv.ParseInt(s, 10, 32)
		valid := err == nil && s != "" && s[0] != '+'
		switch {
		case valid && n >= 0:
			if state != pushedBack || got != time.Duration(n)*time.Millisecond {
				t.Fatalf("parsePushback(%q) = %v, %v, want %v, pushed back", s, got, state, time.Duration(n)*time.Millisecond)
			}
		default:
			if state != refused || got != 0 {
				t.Fatalf("parsePushback(%q) = %v, %v, want a refusal", s, got, state)
			}
		}
	})
}

var allCodes = func() []codes.Code {
	var cs []codes.Code
	for c := codes.OK + 1; c <= codes.Unauthenticated; c++ {
		cs = append(cs, c)
	}
	return append(cs, codes.Code(99))
}()

func TestDefaultClassifierTable(t *testing.T) {
	t.Parallel()
	retried := map[codes.Code]bool{codes.Unavailable: true, codes.DeadlineExceeded: true}
	for _, c := range allCodes {
		for _, pb := range []pushback{noPushback, pushedBack, refused} {
			want := retry.Stop
			if retried[c] || (c == codes.ResourceExhausted && pb == pushedBack) {
				want = retry.Retry
			}
			ae := &attemptError{err: status.Error(c, "x"), code: c, sent: true, pushback: pb}
			assert.Equal(t, want, DefaultClassifier(ae), "DefaultClassifier(%v, pushback %d)", c, pb)
			// The attempt answers for itself with the same table, which the
			// core's default classifier applies, alone or after the user's.
			assert.Equal(t, want, ae.RetryDecision(), "RetryDecision(%v, pushback %d)", c, pb)
			assert.Equal(t, want, retry.DefaultClassifier(ae), "retry.DefaultClassifier(%v, pushback %d)", c, pb)
			mine := retry.Classifiers(func(error) retry.Decision { return retry.Undecided }, retry.DefaultClassifier)
			assert.Equal(t, want, mine(retry.RetryAfter(ae, time.Second)), "Classifiers(mine, retry.DefaultClassifier)(%v)", c)
			// Wrapped as the interceptors wrap it for the loop.
			wrapped := retry.Permanent(retry.RetryAfter(ae, time.Second))
			assert.Equal(t, want, DefaultClassifier(wrapped), "DefaultClassifier(wrapped %v)", c)
			// What a call gives up with came out of a retry loop: never
			// retried again.
			given := &callError{err: &retry.Error{Reason: retry.ErrExhausted, Last: wrapped}}
			assert.Equal(t, retry.Stop, DefaultClassifier(given), "DefaultClassifier(given up on %v)", c)
			assert.Equal(t, retry.Stop, retry.DefaultClassifier(given), "retry.DefaultClassifier(given up on %v)", c)
		}
		// A bare status error has no pushback.
		want := retry.Stop
		if retried[c] {
			want = retry.Retry
		}
		assert.Equal(t, want, DefaultClassifier(status.Error(c, "x")), "DefaultClassifier(status %v)", c)
		assert.Equal(t, want, DefaultClassifier(fmt.Errorf("wrapped: %w", status.Error(c, "x"))), "wrapped status %v", c)
	}
	// Errors without a status: the core's rules.
	assert.Equal(t, retry.Stop, DefaultClassifier(context.Canceled))
	assert.Equal(t, retry.Retry, DefaultClassifier(io.ErrUnexpectedEOF))
	assert.Equal(t, retry.Undecided, DefaultClassifier(errors.New("something else")))
}

func TestOutcomeUnknownTable(t *testing.T) {
	t.Parallel()
	known := map[codes.Code]bool{
		codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true, codes.PermissionDenied: true,
		codes.ResourceExhausted: true, codes.FailedPrecondition: true, codes.Aborted: true, codes.OutOfRange: true,
		codes.Unimplemented: true, codes.Unauthenticated: true,
	}
	for _, c := range allCodes {
		for _, pb := range []pushback{noPushback, pushedBack, refused} {
			ae := &attemptError{err: status.Error(c, "x"), code: c, pushback: pb}
			assert.False(t, ae.OutcomeUnknown(), "an attempt never sent: %v", c)
			assert.False(t, retry.OutcomeUnknown(ae), "the core reads the method: %v", c)

			ae.sent = true
			want := !known[c]
			if pb == pushedBack && (c == codes.Unavailable || c == codes.ResourceExhausted) {
				want = false // the server turned it away
			}
			assert.Equal(t, want, ae.OutcomeUnknown(), "OutcomeUnknown(%v, pushback %d)", c, pb)
			assert.Equal(t, want, retry.OutcomeUnknown(retry.Permanent(ae)), "through the core: %v", c)
		}
	}
}

func TestProtoName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method string
		want   string
		ok     bool
	}{
		{"/pkg.Service/Method", "pkg.Service.Method", true},
		{"/Service/Method", "Service.Method", true},
		{"pkg.Service/Method", "pkg.Service.Method", true},
		{"/pkg.Service/", "", false},
		{"//Method", "", false},
		{"/pkg.Service", "", false},
		{"/pkg.Service/Method/extra", "", false},
		{"/pkg service/Method", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := protoName(tt.method)
		assert.Equal(t, tt.ok, ok, "protoName(%q) ok", tt.method)
		if tt.ok {
			assert.Equal(t, tt.want, string(got), "protoName(%q)", tt.method)
		}
	}
}

// An attempt that may have taken effect, on a method not declared
// idempotent, says so through Unrepeatable, which the loop reports as
// retry.ErrNotIdempotent whenever the classifier would have retried it.
func TestUnrepeatable(t *testing.T) {
	t.Parallel()
	ae := &attemptError{err: status.Error(codes.Unavailable, "x"), code: codes.Unavailable, sent: true}
	assert.NoError(t, ae.Unrepeatable())
	ae.unsafe = true
	assert.ErrorIs(t, ae.Unrepeatable(), retry.ErrNotIdempotent)
	for _, c := range []retry.Classifier{nil, DefaultClassifier, func(error) retry.Decision { return retry.Retry }} {
		_, stop := retry.Next(retry.Policy{Classifier: c}, 1, 0, ae, time.Now(), time.Time{}, 0)
		assert.ErrorIs(t, stop, retry.ErrNotIdempotent)
	}
	// A code that is not worth retrying stops for that reason.
	ae = &attemptError{err: status.Error(codes.Internal, "x"), code: codes.Internal, sent: true, unsafe: true}
	_, stop := retry.Next(retry.Policy{Classifier: DefaultClassifier}, 1, 0, ae, time.Now(), time.Time{}, 0)
	assert.ErrorIs(t, stop, retry.ErrNotRetryable)
}

func TestClientMade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242885 vs. 4194304)"), true},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max length allowed on current machine (1 vs. 0)"), true},
		{status.Error(codes.ResourceExhausted, "grpc: message after decompression larger than max (9 vs. 8)"), true},
		{status.Error(codes.ResourceExhausted, "grpc: received message after decompression larger than max 8"), true},
		{status.Error(codes.Internal, "grpc: failed to decompress the received message: bad"), true},
		{status.Error(codes.Internal, "grpc: failed to unmarshal the received message: bad"), true},
		{status.Error(codes.Internal, "cardinality violation: received no response message from non-server-streaming RPC"), true},
		{status.Error(codes.ResourceExhausted, "stream terminated by RST_STREAM with error code: ENHANCE_YOUR_CALM"), true},
		{status.Error(codes.PermissionDenied, "stream terminated by RST_STREAM with error code: INADEQUATE_SECURITY"), true},
		{fmt.Errorf("wrapped: %w", status.Error(codes.ResourceExhausted, "stream terminated by RST_STREAM with error code: FLOW_CONTROL")), true},
		// REFUSED_STREAM proves the server did not process the stream.
		{status.Error(codes.Unavailable, "stream terminated by RST_STREAM with error code: REFUSED_STREAM"), false},
		// The server's own answers.
		{status.Error(codes.ResourceExhausted, "quota exceeded"), false},
		{status.Error(codes.InvalidArgument, "grpc: nothing like it"), false},
		{status.Error(codes.ResourceExhausted, "trying to send message larger than max (5 vs. 4)"), false}, // never sent
		{errors.New("grpc: received message larger than max"), false},                                      // no status
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, clientMade(tt.err), "clientMade(%v)", tt.err)
	}
	ae := &attemptError{err: status.Error(codes.ResourceExhausted, "x"), code: codes.ResourceExhausted, sent: true, clientMade: true}
	assert.True(t, ae.OutcomeUnknown())
	ae.sent = false
	assert.False(t, ae.OutcomeUnknown(), "a call that never left the client did nothing")
}

// The server's RESOURCE_EXHAUSTED and a pushback say it is overloaded; a
// RESOURCE_EXHAUSTED grpc-go made on the client does not.
func TestAttemptErrorThrottled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		e    attemptError
		want bool
	}{
		{"resource exhausted", attemptError{code: codes.ResourceExhausted, sent: true}, true},
		{"made by the client", attemptError{code: codes.ResourceExhausted, sent: true, clientMade: true}, false},
		{"pushback", attemptError{code: codes.Unavailable, sent: true, pushback: pushedBack}, true},
		{"unavailable", attemptError{code: codes.Unavailable, sent: true}, false},
	}
	for _, tt := range tests {
		if got := tt.e.Throttled(); got != tt.want {
			t.Errorf("%s: Throttled() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
