package retrygrpc_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/grpclog"
)

// TestMain records grpclog's warnings, which the tests read with logged. It
// installs the logger before any gRPC function runs, as grpclog.SetLoggerV2
// requires; errors still go to stderr, as grpclog's default logger sends
// them.
func TestMain(m *testing.M) {
	grpclog.SetLoggerV2(&testLog)
	os.Exit(m.Run())
}

var testLog recorder

// recorder is a grpclog.LoggerV2 that keeps the warnings and prints the
// errors.
type recorder struct {
	mu       sync.Mutex
	warnings []string
}

// logged returns the warnings logged so far that contain s.
func logged(s string) []string {
	testLog.mu.Lock()
	defer testLog.mu.Unlock()
	var out []string
	for _, w := range testLog.warnings {
		if strings.Contains(w, s) {
			out = append(out, w)
		}
	}
	return out
}

func (r *recorder) warn(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, s)
}

func (*recorder) Info(...any)                      {}
func (*recorder) Infoln(...any)                    {}
func (*recorder) Infof(string, ...any)             {}
func (r *recorder) Warning(args ...any)            { r.warn(fmt.Sprint(args...)) }
func (r *recorder) Warningln(args ...any)          { r.warn(fmt.Sprintln(args...)) }
func (r *recorder) Warningf(f string, args ...any) { r.warn(fmt.Sprintf(f, args...)) }
func (*recorder) Error(args ...any)                { fmt.Fprint(os.Stderr, args...) }
func (*recorder) Errorln(args ...any)              { fmt.Fprintln(os.Stderr, args...) }
func (*recorder) Errorf(f string, args ...any)     { fmt.Fprintf(os.Stderr, f+"\n", args...) }
func (*recorder) Fatal(args ...any)                { fmt.Fprint(os.Stderr, args...); os.Exit(1) }
func (*recorder) Fatalln(args ...any)              { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (*recorder) Fatalf(f string, args ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", args...)
	os.Exit(1)
}
func (*recorder) V(int) bool { return false }
