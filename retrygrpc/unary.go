package retrygrpc

import (
	"context"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// UnaryClientInterceptor returns a [grpc.UnaryClientInterceptor] that makes
// each unary call with the retry loop of [retry.Do] and policy p (or the
// call's [CallPolicy]). Install it first in the chain, so that each attempt
// passes through the interceptors after it, and turn grpc-go's own retries
// off on the same connection:
//
//	conn, err := grpc.NewClient(target, creds, grpc.WithDisableRetry(),
//		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy)))
//
// A nil Classifier in p means [DefaultClassifier]. Policy.AttemptTimeout
// bounds each attempt, and the server sees that bound as the attempt's
// deadline. What is retried, and when, is in the package documentation.
// [CallPolicy] and [WithPolicy] give one call its own policy.
//
// A call stops as retry.Do does: the caller's context ends, the status is not
// retried or the attempt is not safe to repeat, attempts or budget run out,
// or the server's pushback is above Policy.MaxRetryAfter or past the
// deadline. It then returns an error that holds a [*retry.Error] (reach it
// with errors.As) and whose gRPC status ([status.Code], [status.FromError])
// is the last attempt's, or the context's if the caller's context ended the
// call, or UNAVAILABLE if the policy's Breaker or Concurrency stopped it
// before any attempt. The reply holds what the last attempt decoded into it, if anything.
//
// A Policy with Hedge set (see [HedgingPolicy]) hedges the calls of methods
// declared idempotent whose reply is a proto.Message: attempts then run at
// once, each decoding into a reply of its own (the first into the caller's),
// and on success the caller's reply holds the winner's, copied into it
// (proto.Reset, then proto.Merge) once every attempt has returned; on
// failure it holds what the first attempt decoded, if anything. Other calls
// run under the Policy without its Hedge. The package documentation says
// what hedging does.
//
// The interceptor is safe for concurrent use; p's funcs and Budget must be.
func UnaryClientInterceptor(p retry.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return newConfig(p, opts).unary
}

func (c *config) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	u := &unaryCall{cfg: c, ctx: ctx, method: method, req: req, reply: reply, cc: cc, invoker: invoker}
	u.policy = c.policyFor(ctx, opts)
	// Each attempt also learns whether a stream was opened (the peer is set
	// only then) and the server's trailer, where pushback comes. The
	// caller's grpc.OnFinish callbacks are kept out of the attempts: gRPC
	// would run them once per attempt, and they are due once per call.
	u.opts = make([]grpc.CallOption, 0, len(opts)+2)
	var finish []func(error)
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			finish = append(finish, f.OnFinish)
			continue
		}
		u.opts = append(u.opts, o)
	}
	u.opts = append(u.opts, grpc.Peer(&u.peer), grpc.Trailer(&u.trailer))
	var err error
	//lint:ignore SA1019 a policy that still says Hedge hedges until that name goes
	if u.policy.HedgeDelay != nil || u.policy.Hedge != nil {
		err = u.hedge()
	} else {
		err = retry.Do(ctx, u.attempt, u.policy)
	}
	if err != nil {
		err = callFailed(ctx, err)
	}
	for _, f := range finish {
		if f != nil {
			f(err)
		}
	}
	return err
}

// unaryCall is one unary call through the interceptor. Its attempts run on
// the caller's goroutine, inside retry.Do, unless the call is hedged (see
// hedge).
type unaryCall struct {
	cfg     *config
	ctx     context.Context
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption
	policy  *retry.Policy // shared: never changed
	// replyType makes a fresh reply for each attempt of a hedged call after
	// the first; nil when the call is not hedged.
	replyType protoreflect.MessageType

	attempts int
	peer     peer.Peer
	trailer  metadata.MD
}

func (u *unaryCall) attempt(ctx context.Context) error {
	u.attempts++
	if u.attempts > 1 {
		ctx = withPreviousAttempts(ctx, u.attempts-1)
	}
	u.peer, u.trailer = peer.Peer{}, nil
	err := u.invoker(ctx, u.method, u.req, u.reply, u.cc, u.opts...)
	if err == nil {
		return nil
	}
	return u.cfg.judge(u.ctx, u.cc, u.method, err, u.peer.Addr != nil, u.trailer, false)
}

// judge turns a failed attempt's error into what the retry loop needs: the
// server's pushback as a delay, and the attempt's own account of itself (its
// code table, and whether it may be repeated: not when the server said not
// to retry, nor when it may have taken effect and the method is not
// declared idempotent; idempotent says the caller knows it is). Safety and
// the server's refusal are not rules of chance, so no Classifier can
// override them: the loop applies an error's Unrepeatable reason after any
// classifier. In a hedged call, that reason ends the hedging and lets the
// attempts in flight run, as A6 asks of a pushback that says not to retry.
func (c *config) judge(ctx context.Context, cc *grpc.ClientConn, method string, err error, sent bool,
	trailer metadata.MD, idempotent bool) error {
	ae := &attemptError{err: err, code: status.Code(err), sent: sent, grpcRetried: c.grpcRetries(cc, method)}
	if sent && clientMade(err) {
		// Not the server's answer: whatever its trailer held, it does not
		// speak about this status.
		ae.clientMade = true
		trailer = nil
	}
	delay, pb := parsePushback(trailer)
	ae.pushback = pb
	if pb == refused {
		return ae
	}
	ae.unsafe = ae.OutcomeUnknown() && !idempotent && !c.idempotent(ctx, method)
	if pb == pushedBack {
		return retry.RetryAfter(ae, delay)
	}
	return ae
}
