// Package retrygrpc retries gRPC calls with the policies of package
// [github.com/seed93a044d1/retry]: the same backoff, budget, limiter and
// deadline rules as every other call the service makes, through grpc-go's
// client interceptors. Turning it on is one line where the connection is
// made, with grpc-go's own retries off:
//
//	conn, err := grpc.NewClient(target, creds, grpc.WithDisableRetry(),
//		grpc.WithChainUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy)),
//		grpc.WithChainStreamInterceptor(retrygrpc.StreamClientInterceptor(policy)))
//
// Each call runs the core loop, [retry.Do], once: MaxAttempts counts every
// attempt, the Budget is asked for every retry, and no attempt starts, or
// wait runs, past the call's deadline.
//
// # What is retried
//
// Whether another attempt could succeed is the classifier's to say:
// [DefaultClassifier] retries UNAVAILABLE and DEADLINE_EXCEEDED, and
// RESOURCE_EXHAUSTED when the server says when to come back; its
// documentation gives the reason for every code. A Policy's own Classifier
// replaces it; build on it with [retry.Classifiers]. A Policy shared with
// retry.Do and retryhttp, whose Classifier is retry.Classifiers(mine,
// retry.DefaultClassifier), keeps the gRPC table wherever mine has no
// opinion: each attempt's error answers for itself with it.
//
// Whether another attempt is safe follows gRFC A6: a call that the server
// may have carried out is repeated only if its method is declared
// idempotent, while one the server is known not to have acted on is
// repeated for any method. Known not to have acted on: a call that never
// left the client (no connection could be made, no backend was ready), one
// the server turned away with a pushback on UNAVAILABLE or
// RESOURCE_EXHAUSTED, and one it answered with a code that says it refused
// the request (INVALID_ARGUMENT, NOT_FOUND, and the other codes the table
// stops on anyway). May have acted on: anything else once the request was
// sent, such as UNAVAILABLE from a connection cut mid-call or from the
// server itself, DEADLINE_EXCEEDED, INTERNAL, and any status that grpc-go
// made on the client after the request left, whatever its code: a reply
// over the client's receive limit (RESOURCE_EXHAUSTED), one it could not
// decompress or decode, a stream reset by the server's HTTP/2 layer. This rule is not the
// classifier's: no Classifier can make the interceptors repeat such a call,
// which stops with [retry.ErrNotIdempotent] when the classifier would have
// retried it.
// A call's error says which case it was through a method OutcomeUnknown()
// bool, which [retry.Error].OutcomeUnknown reports for the whole call.
//
// A call is declared idempotent, and the declarations add up, when:
//
//   - its method's .proto says option idempotency_level = IDEMPOTENT or
//     NO_SIDE_EFFECTS, and the generated code is linked in (it registers
//     the file with the protobuf runtime, where the interceptor looks);
//   - its method is listed with [Idempotent], or an [IdempotentFunc] says so;
//   - its outgoing metadata has a non-empty idempotency-key or
//     x-idempotency-key, so that the server can recognise a repeat, as the
//     Idempotency-Key header does for retryhttp.
//
// CANCELLED caused by the caller never retries: the loop stops as soon as
// the caller's context ends, before asking anything.
//
// # Pushback
//
// A server asks for a delay with the grpc-retry-pushback-ms trailer, which
// counts as Retry-After does in HTTP: the next attempt waits the longer of
// the backoff and the pushback (A6 waits exactly the pushback; never
// retrying sooner than the backoff keeps a server that answers 0 from
// being hammered); a pushback above Policy.MaxRetryAfter stops the call at
// once with [retry.ErrServerDelay], and one that would pass the deadline
// with [retry.ErrNoTimeLeft]. A negative or malformed value, or several
// values, means "do not retry" (A6): the call stops at once, with
// [retry.ErrNotRetryable], or, when it is hedged, sends no more hedges (see
// Hedging). The parser
// accepts an optional '-' and ASCII digits that fit an int32, leading zeros
// included, as grpc-go and grpc-java read them; anything else is malformed.
//
// # What the server sees
//
// Every retry, and every hedge, carries the request metadata
// grpc-previous-rpc-attempts: the number of attempts before it (1, 2, ...),
// absent on the first, as A6 specifies. Policy.AttemptTimeout bounds each unary attempt, and the
// server sees it as the attempt's deadline (grpc-timeout).
//
// # Hedging
//
// A Policy whose Hedge is set hedges unary calls: when the first attempt
// has not answered after the hedge delay, another is sent beside it, and
// the first success wins, the others cancelled (the server sees their
// contexts end). [HedgingPolicy] gives the whole of gRFC A6's
// hedgingPolicy in one call:
//
//	policy := retrygrpc.HedgingPolicy(3, 50*time.Millisecond, codes.Unavailable)
//	policy.Budget = retry.NewBudget(0.1, 10) // A6's retryThrottling, as the Budget does it
//
// Only work that is safe to send twice, and whose attempts can run at
// once, is hedged: a unary call of a method declared idempotent (as above),
// whose reply is a proto.Message, on a connection where grpc-go's own
// retries are off for the method. Any other call (a method not declared
// idempotent, a stream, a reply of a custom codec's type) runs under the
// same Policy without its Hedge, one attempt at a time, so a call that is
// not idempotent is never hedged. Hedging is off unless a Policy asks for
// it.
//
// Hedges are attempts: MaxAttempts counts them, the Limiter paces them, each
// withdraws from the Budget (a refusal ends the hedging, not the call), none
// starts unless it fits before the deadline, and each carries
// grpc-previous-rpc-attempts, the number of attempts sent before it, as A6
// asks. Each attempt decodes into a reply of its own, the first into the
// caller's, and the winner's is copied into the caller's reply once every
// attempt has returned. A status the classifier stops on ends the call at
// once, cancelling the others (A6's fatal status); one it retries lets them
// run, and the next hedge is sent as soon as that failure's wait has
// passed, at once under HedgingPolicy (A6's non-fatal status). A pushback
// of n ms holds the next hedge n ms; one that says not to retry ends the
// hedging, and the attempts in flight may still win (A6); if none does, the
// call stops with [retry.ErrNotRetryable]. A call stops once its deadline
// has passed, whatever is in flight.
//
// The method's declaration is read before the first attempt: an
// [IdempotentFunc] is asked then, on the caller's goroutine. So is grpc-go's
// service config, which a connection learns from its resolver: a call made
// before that, as a new connection is first used, is hedged even if the
// config turns grpc-go's retries on for its method.
//
// # Streams
//
// A stream is retried only until it is committed, as A6 defines it: until
// the first response header or message arrives. After that, an error is
// returned to the caller as it is, and Policy.AttemptTimeout no longer
// applies: it bounds each attempt until commit.
//
// A server-streaming call is retried whole: its one request is sent again
// on a new stream. Opening it sends nothing yet: the loop runs in the first
// RecvMsg or Header, and its first attempt opens the stream there and sends
// the request the caller gave SendMsg. So the limiter paces that first
// attempt, the loop's clock and the budget's deposit start with it, a call
// stopped before it has sent nothing, and the error of a stream that never
// committed, the failure to open it included, comes from RecvMsg once
// retrying has stopped, as gRPC reports a stream's status. Until commit the
// stream's Context is the caller's context.
//
// A client-streaming or bidirectional call is retried only while its stream
// opens, when nothing has been sent: its messages are never replayed. A6
// keeps a replay buffer for them, but a client-streaming call usually
// commits only when the server answers at the end, so the buffer would hold
// the whole upload, or give up retrying, silently, at a size the caller
// does not see; and a bidirectional call's sender and receiver run on
// different goroutines, so a replay in RecvMsg would race with the caller's
// SendMsg. Retry such a call above the stream, where the whole exchange can
// be started again.
//
// # Concurrency and circuit breakers
//
// Policy.Concurrency and Policy.Breaker bound every attempt, as in
// [retry.Do]: the first, each retry and each hedge of a unary call, and each
// attempt of a stream. A unary attempt holds its slot until its status
// arrives, which the server sends once its handler has returned. A hedge
// starts only if a slot is free at once; one that loses gives its slot back
// as soon as its attempt returns, cancelled, and the server may run its
// handler a moment longer, until it sees the stream reset, so with hedging
// a server can for that moment be working on more calls than there are
// slots.
//
// A stream's attempt ends when the stream commits (a client-streaming or
// bidirectional stream's, when it opens): its slot is given back and its
// Breaker told then, and the rest of the stream runs outside both. So a
// Concurrency bounds the streams being started, not the streams open, and
// a stream that fails after commit has counted as a success in the
// breaker; to
// bound open streams, take a slot of another Concurrency with Policy.Admit
// before opening one and give it back when it ends.
//
// A Breaker counts the failures the classifier retries (UNAVAILABLE, a
// DEADLINE_EXCEEDED), never a status it stops on (NOT_FOUND,
// INVALID_ARGUMENT). While it refuses, a call sends nothing and fails at
// once: errors.Is(err, [retry.ErrBreakerOpen]) holds, and the Reason of its
// [*retry.Error] has a method Until() time.Time. A call that finds no slot
// in time fails with [retry.ErrNoSlot] in the same way. A stream so
// stopped fails where its errors before commit come from (see Streams): a
// server-streaming call at its first RecvMsg, NewStream, SendMsg and
// CloseSend having returned nil and Header nothing; a client-streaming or
// bidirectional call at NewStream. See Errors for their status.
//
// # grpc-go's own retries
//
// grpc-go retries the methods that a service config gives a retryPolicy,
// and that config can come from the name resolver (DNS TXT records, xDS)
// without the client's code asking for it. Left on, those retries would
// multiply with the interceptors' (MaxAttempts times maxAttempts attempts,
// each budget blind to the other's), and both write
// grpc-previous-rpc-attempts, so the server could not tell attempts apart.
// So turn them off with [grpc.WithDisableRetry] on the connections that use
// these interceptors. That leaves grpc-go's transparent retries on: they
// repeat only calls that never reached the server's application (A6), which
// is safe under the interceptors and invisible to them.
//
// If they are on for a method all the same (its service config has a
// retryPolicy, as ClientConn.GetMethodConfig reports it, and the connection
// was dialled without WithDisableRetry), the interceptors do not retry its
// calls: each makes one attempt, which is grpc-go's whole loop, and stops
// with [retry.ErrAlreadyRetried] where it would have retried. The first
// time this happens for a method, they log a warning through grpclog
// (component "retrygrpc") naming the method and the fix. Refusing the call
// would turn a resolver's config change into an outage, and retrying it
// would multiply the load on a failing server; leaving it to grpc-go keeps
// the service owner's retry policy and no more. The check runs only after
// a failed attempt, so a call that succeeds pays nothing for it. A retry
// policy that xDS gives per route is not in that service config, and goes
// unseen. grpc-go does not say whether WithDisableRetry was given: the
// interceptors read it from the ClientConn's options by reflection, where a
// test pins it for the grpc-go version this module requires; should a
// later version move it, they keep retrying and warn that the retries may
// multiply.
//
// # Errors
//
// When retrying stops, a unary call (and a stream that never committed)
// returns an error that holds a [*retry.Error] (errors.As reaches it, with
// the stop reason and the last attempt's error) and whose gRPC status, for
// [status.Code] and [status.FromError], is the one gRPC itself would have
// given: the last attempt's, unchanged (code, message, details), or
// CANCELLED or DEADLINE_EXCEEDED if the caller's context ended the call.
// Giving up early because no attempt could fit before the deadline keeps
// the last attempt's status, or is DEADLINE_EXCEEDED if no attempt was
// made (the limiter's next token comes too late); errors.Is(err,
// context.DeadlineExceeded) is true then. A call that the Breaker refused,
// or that found no Concurrency slot, keeps the last attempt's status too,
// or is UNAVAILABLE if no attempt was made, as grpc-go's own client-side
// circuit breaking reports a call it drops; errors.Is(err,
// retry.ErrBreakerOpen) or errors.Is(err, retry.ErrNoSlot) says which.
//
// # Call options
//
// The call's options reach every attempt, but for [grpc.OnFinish]: gRPC
// would run it at the end of each attempt, and it documents it as once per
// call. The interceptors run it themselves, once, with the error the call
// returns (nil for success), when the call ends: a unary call as it
// returns, a stream when its committed attempt ends or retrying stops. A
// server-streaming call whose RecvMsg and Header are never called makes no
// attempt, and its OnFinish does not run.
//
// # One call
//
// [CallPolicy] gives one call its own policy, as a [grpc.CallOption]:
//
//	reply, err := client.Get(ctx, req, retrygrpc.CallPolicy(retry.Policy{MaxAttempts: 1}))
//
// [WithPolicy] does it through the context, for a policy chosen far from
// the call site; a CallPolicy wins over it.
//
// # Retry at one layer
//
// What a call gives up with holds a [*retry.Error], so a retry.Do around a
// call through these interceptors stops at once instead of multiplying
// their attempts, whether its classifier is retry.DefaultClassifier or
// [DefaultClassifier].
package retrygrpc
