package retrygrpc

import (
	"context"
	"strings"
	"sync"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Option configures [UnaryClientInterceptor] and [StreamClientInterceptor].
// Options apply in order; a nil Option does nothing.
type Option func(*config)

// Idempotent declares methods safe to repeat even when an attempt may have
// taken effect, so that the interceptors retry them on codes that leave the
// outcome open (UNAVAILABLE after the call was sent, DEADLINE_EXCEEDED...),
// and hedge them when the Policy hedges.
// Methods are full gRPC method names as the interceptors see them,
// "/package.Service/Method"; the generated code has them as constants
// (Service_Method_FullMethodName). Declarations add up: a method is
// idempotent if any of them says so (see the package documentation).
func Idempotent(methods ...string) Option {
	return func(c *config) {
		if c.methods == nil {
			c.methods = make(map[string]bool, len(methods))
		}
		for _, m := range methods {
			c.methods[m] = true
		}
	}
}

// IdempotentFunc declares as safe to repeat every call for which f returns
// true. f receives the caller's context (its outgoing metadata, for
// instance) and the full method name, "/package.Service/Method". It is asked
// on the caller's goroutine, only after an attempt failed in a way that may
// have taken effect, or, when the call's Policy hedges, before its first
// attempt; it must be safe for concurrent use. Declarations add up: a call
// is idempotent if any of them says so. A nil f does nothing.
func IdempotentFunc(f func(ctx context.Context, method string) bool) Option {
	return func(c *config) {
		if f != nil {
			c.funcs = append(c.funcs, f)
		}
	}
}

// CallPolicy returns a [grpc.CallOption] that makes the interceptors retry
// one call with p instead of the Policy they were built with, as a later
// Policy replaces an earlier one in [retry.Do]: whole, never merged. A nil
// Classifier in p means [DefaultClassifier]. Pass it with the call, or with
// [grpc.WithDefaultCallOptions]; when several are passed, the last one
// counts. For example, to make one call only once:
//
//	reply, err := client.Get(ctx, req, retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 1}))
//
// gRPC itself ignores the option, so it is harmless on a connection without
// the interceptors.
func CallPolicy(p retry.Policy) grpc.CallOption {
	return &callPolicy{policy: withClassifier(p)}
}

type callPolicy struct {
	grpc.EmptyCallOption
	policy retry.Policy
}

// WithPolicy returns a copy of ctx that makes the interceptors retry the
// calls made with it under p instead of the Policy they were built with, as
// retryhttp.WithPolicy does for HTTP: for a policy chosen far from the call
// site, such as per tenant or per request class. A [CallPolicy] on the call
// wins over it. A nil Classifier in p means [DefaultClassifier]. Like every
// context value it reaches the contexts derived from ctx, outgoing calls
// made while serving a request included.
func WithPolicy(ctx context.Context, p retry.Policy) context.Context {
	p = withClassifier(p)
	return context.WithValue(ctx, policyKey{}, &p)
}

type policyKey struct{}

// config is what the interceptors are built with. It is not changed after
// the interceptor is made, so calls share it without a lock, but for warned,
// which is safe for concurrent use.
type config struct {
	policy  retry.Policy
	methods map[string]bool
	funcs   []func(context.Context, string) bool
	warned  sync.Map // the methods warned about grpc-go's own retries
}

func newConfig(p retry.Policy, opts []Option) *config {
	c := &config{policy: withClassifier(p)}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// withClassifier gives p the gRPC code table unless it has a classifier.
func withClassifier(p retry.Policy) retry.Policy {
	if p.Classifier == nil {
		p.Classifier = DefaultClassifier
	}
	return p
}

// policyFor returns the policy of one call: the last CallPolicy among its
// options, else its context's, else the interceptor's. Each already has its
// classifier, and none is ever changed: the caller may keep the pointer, and
// must copy the policy to change it.
func (c *config) policyFor(ctx context.Context, opts []grpc.CallOption) *retry.Policy {
	for i := len(opts) - 1; i >= 0; i-- {
		if cp, ok := opts[i].(*callPolicy); ok {
			return &cp.policy
		}
	}
	if p, ok := ctx.Value(policyKey{}).(*retry.Policy); ok {
		return p
	}
	return &c.policy
}

// idempotent reports whether a call of method, made with ctx, is declared
// safe to repeat.
func (c *config) idempotent(ctx context.Context, method string) bool {
	if c.methods[method] {
		return true
	}
	for _, f := range c.funcs {
		if f(ctx, method) {
			return true
		}
	}
	return hasIdempotencyKey(ctx) || protoIdempotent(method)
}

// hasIdempotencyKey reports whether the call carries an idempotency key in
// its outgoing metadata, as retryhttp honours the Idempotency-Key header: a
// server that takes the key recognises a repeat.
func hasIdempotencyKey(ctx context.Context) bool {
	for _, key := range [...]string{"idempotency-key", "x-idempotency-key"} {
		for _, v := range metadata.ValueFromOutgoingContext(ctx, key) {
			if v != "" {
				return true
			}
		}
	}
	return false
}

// protoIdempotent reports whether the .proto file that declares method,
// registered with the protobuf runtime (as generated code does when it is
// linked in), marks it with "option idempotency_level = IDEMPOTENT" or
// NO_SIDE_EFFECTS.
func protoIdempotent(method string) bool {
	name, ok := protoName(method)
	if !ok {
		return false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok {
		return false
	}
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_IDEMPOTENT, descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		return true
	}
	return false
}

// protoName turns "/package.Service/Method" into "package.Service.Method".
func protoName(method string) (protoreflect.FullName, bool) {
	service, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok || service == "" || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	full := protoreflect.FullName(service + "." + name)
	return full, full.IsValid()
}
