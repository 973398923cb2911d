package retrygrpc

import (
	"context"
	"time"

	"github.com/seed93a044d1/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// HedgingPolicy returns the Policy of gRFC A6's hedgingPolicy: the first
// attempt is sent at once, and another each hedgingDelay that passes with
// no answer, up to maxAttempts in all, every one in flight at once if need
// be; the first success wins and the others are cancelled. A status in
// nonFatal lets the others run, and the next hedge is sent at once, instead
// of at its delay; any other status (and an error with none, which counts
// as UNKNOWN, as gRPC reports it) ends the call, cancelling the others. A
// server's pushback of n ms sends the next hedge n ms later instead, and
// one that says not to retry sends no more hedges, while those in flight
// may still win. With no hedge in flight, a non-fatal status is followed by
// the next attempt at once: that is A6's next hedge, and the call has no
// other retries.
//
// maxAttempts counts every attempt, the first included; below 1 it counts
// as 1, which sends no hedge. It is not capped at 5, as A6 caps a service
// config's value: that cap guards against a config from DNS, and this one
// is the program's. A negative hedgingDelay counts as 0, which sends all
// maxAttempts attempts at once. A code in nonFatal that is OK, or not one
// of gRPC's, is ignored.
//
// The Policy is a plain value: set its other fields (Budget, Limiter,
// AttemptTimeout, Observe) before passing it to [UnaryClientInterceptor] or
// [CallPolicy]. Its Backoff is 0, as A6 waits no backoff between a failure
// and the next hedge; its Classifier retries exactly the nonFatal codes,
// and replaces [DefaultClassifier]. Only unary calls of methods declared
// idempotent are hedged (see the package documentation); every other call
// runs under the same Policy without its HedgeDelay: a retry policy with that
// Classifier, no backoff, and the rules of safety of every retry.
func HedgingPolicy(maxAttempts int, hedgingDelay time.Duration, nonFatal ...codes.Code) retry.Policy {
	maxAttempts = max(maxAttempts, 1)
	var set codeSet
	for _, c := range nonFatal {
		if c > codes.OK && c <= codes.Unauthenticated {
			set |= 1 << c
		}
	}
	return retry.Policy{
		MaxAttempts: maxAttempts,
		MaxInFlight: maxAttempts,
		HedgeDelay:  retry.Constant(max(hedgingDelay, 0)),
		Backoff:     retry.Constant(0),
		Classifier:  set.classify,
	}
}

// codeSet is a set of gRPC status codes, one bit each.
type codeSet uint32

// classify retries the codes in s and stops on every other, and, as
// DefaultClassifier does, on an error that already came out of a retry loop.
func (s codeSet) classify(err error) retry.Decision {
	if fromLoop(err) {
		return retry.Stop
	}
	code := codes.Unknown
	if ae, ok := findAttempt(err); ok {
		code = ae.code
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	if code < 32 && s&(1<<code) != 0 {
		return retry.Retry
	}
	return retry.Stop
}

// hedge makes a unary call whose Policy hedges. It hedges the call only if
// the call is safe to send more than once and its attempts can run at once:
// its method is declared idempotent, grpc-go's own retries are off for it
// (each attempt would be a whole retry loop of grpc-go's), and its reply is
// a proto.Message, into a fresh one of which each hedge can decode. Any
// other call runs under the Policy without its Hedge.
func (u *unaryCall) hedge() error {
	p := *u.policy
	msg, ok := u.reply.(proto.Message)
	if !ok || !msg.ProtoReflect().IsValid() || !u.cfg.idempotent(u.ctx, u.method) ||
		u.cfg.grpcRetries(u.cc, u.method) {
		return retry.Do(u.ctx, u.attempt, &p, retry.Sequential)
	}
	// The type is read before any attempt starts: the first decodes into msg
	// while the others run.
	u.replyType = msg.ProtoReflect().Type()
	p.AttemptInContext = true
	won, err := retry.DoValue(u.ctx, u.hedgeAttempt, &p)
	if err != nil {
		return err
	}
	if won != msg {
		// Every attempt has returned: nothing writes msg any more.
		proto.Reset(msg)
		proto.Merge(msg, won)
	}
	return nil
}

// hedgeAttempt is one attempt of a hedged call, which may run beside the
// others. The first attempt decodes into the caller's reply and learns its
// peer and trailer through the call's own options, as every attempt of a
// call that is not hedged does; each later one has its own of all three, so
// that no two attempts write the same memory. The winner's reply is copied
// into the caller's once all have returned.
func (u *unaryCall) hedgeAttempt(ctx context.Context) (proto.Message, error) {
	reply := u.reply.(proto.Message)
	opts, pr, tr := u.opts, &u.peer, &u.trailer
	if n := retry.AttemptFrom(ctx); n > 1 {
		ctx = withPreviousAttempts(ctx, n-1)
		reply = u.replyType.New().Interface()
		pr, tr = new(peer.Peer), new(metadata.MD)
		own := len(u.opts) - 2 // the call's options, without the first attempt's Peer and Trailer
		opts = append(u.opts[:own:own], grpc.Peer(pr), grpc.Trailer(tr))
	}
	if err := u.invoker(ctx, u.method, u.req, reply, u.cc, opts...); err != nil {
		return nil, u.cfg.judge(u.ctx, u.cc, u.method, err, pr.Addr != nil, *tr, true)
	}
	return reply, nil
}
