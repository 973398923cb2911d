package retrygrpc

import (
	"reflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
)

var logger = grpclog.Component("retrygrpc")

// grpcRetries reports whether grpc-go's own retries are on for calls of
// method on cc: the service config gives the method a retryPolicy, and cc
// was dialled without grpc.WithDisableRetry. Each of the interceptors'
// attempts is then a whole retry loop of grpc-go's, and retrying it would
// multiply the two; so the interceptors leave such a call to grpc-go's loop,
// and the first time for each method, they say so through grpclog.
//
// grpc-go does not expose whether WithDisableRetry was given: it is read
// from the ClientConn's options by reflection, a field that a test pins for
// the grpc-go version this module requires. If a later version moves it,
// the interceptors cannot tell, keep retrying, and warn once that the
// retries may multiply. A retry policy that comes from xDS routes is not in
// the service config that ClientConn.GetMethodConfig reads, and goes unseen.
//
// It is asked only after a failed attempt, so a call that succeeds pays
// nothing for it.
func (c *config) grpcRetries(cc *grpc.ClientConn, method string) bool {
	if cc == nil || cc.GetMethodConfig(method).RetryPolicy == nil {
		return false
	}
	disabled, known := retryDisabled(cc)
	if disabled {
		return false
	}
	if _, warned := c.warned.LoadOrStore(method, true); !warned {
		if known {
			logger.Warningf("grpc-go's own retries are on for %s: its service config has a retryPolicy, "+
				"and the connection was not dialled with grpc.WithDisableRetry(). So that the two retry loops "+
				"do not multiply, the interceptors leave its calls to grpc-go's (their Policy makes one attempt, "+
				"which stops with retry.ErrAlreadyRetried); dial with grpc.WithDisableRetry() to retry them "+
				"with the Policy instead", method)
		} else {
			logger.Warningf("%s has a retryPolicy in its service config, and this version of grpc-go does "+
				"not let the interceptors tell whether grpc.WithDisableRetry() was given: without it, "+
				"grpc-go's retries and the interceptors' multiply", method)
		}
	}
	return known
}

// disableRetry is the path to grpc.ClientConn's disableRetry option (the
// field dopts.disableRetry in grpc-go v1.85), or nil if there is no such
// bool field.
var disableRetry = func() []int {
	opts, ok := reflect.TypeFor[grpc.ClientConn]().FieldByName("dopts")
	if !ok || opts.Type.Kind() != reflect.Struct {
		return nil
	}
	f, ok := opts.Type.FieldByName("disableRetry")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return append(append([]int(nil), opts.Index...), f.Index...)
}()

// retryDisabled reports whether cc was dialled with grpc.WithDisableRetry,
// and whether it could tell. The option is set when cc is made and never
// changes, so reading it needs no lock.
func retryDisabled(cc *grpc.ClientConn) (disabled, known bool) {
	if disableRetry == nil {
		return false, false
	}
	return reflect.ValueOf(cc).Elem().FieldByIndex(disableRetry).Bool(), true
}
