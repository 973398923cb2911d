// Package retryotel reports what the retry loops of package
// [github.com/seed93a044d1/retry] do, in OpenTelemetry metrics and span
// events. [Instrument] turns a policy into an instrumented one, in the line
// that declares it:
//
//	var apiPolicy = retryotel.Instrument(retry.Policy{MaxAttempts: 5},
//		retryotel.WithAttributes(attribute.String("peer.service", "payments")))
//
// It works through [retry.Policy].Observe, so it sees every call made with
// the policy, by retry.Do, retry.DoValue or retryhttp, and keeps the
// policy's own Observe. Only the policies it returns are instrumented: a
// policy that a request carries for itself (retryhttp.WithPolicy) must go
// through Instrument too.
//
// # Metrics
//
// The meter's scope is [ScopeName]. Every measurement also carries the
// attributes given with [WithAttributes].
//
//   - retry.attempts, a counter of {attempt}: every attempt made, with
//     retry.attempt.kind, its attempt type as gRFC A96 names them, and,
//     when the attempt failed, error.type. The type is "original" for a
//     call's first attempt, "hedge" for one started beside attempts of the
//     call still in flight ([retry.Event].Hedge, see [retry.Policy].Hedge),
//     and "retry" for any other: one started after a failure, with none of
//     the call's attempts in flight. An attempt cut because another won
//     has error.type "canceled".
//   - retry.calls, a counter of {call}: every call ended, with retry.result,
//     and, when it failed, error.type (of its last attempt, or of its stop
//     reason if no attempt was made) and retry.outcome_unknown (true when an
//     attempt may have taken effect though the call failed; see
//     [retry.OutcomeUnknown]).
//   - retry.call.attempts, a histogram of {attempt}: the attempts each call
//     made, hedges included, with retry.result.
//   - retry.call.duration, a histogram in seconds: the time each call took,
//     waits included, with retry.result.
//   - retry.wait.duration, a histogram in seconds: the time really waited
//     before each retry ([retry.Event].Waited), recorded when the wait
//     ends: a wait that the caller's cancel cuts short counts what was
//     waited, not what was planned. With retry.wait.set_by: "backoff",
//     "server" (Retry-After was longest), "limiter" (the Limiter made the
//     retry wait longer) or "slot" (the retry then waited for a
//     [retry.Concurrency] slot); a retry that followed at once counts a wait of 0
//     set by the backoff. The Limiter's wait before a call's first attempt
//     is no retry's wait: it is in retry.call.duration, not here; nor is a
//     hedge's start, which waits for the hedge delay beside an attempt in
//     flight, not after a failure.
//   - retry.slot.wait.duration, a histogram in seconds: [retry.Event].Waited
//     of each attempt, the first and hedges included, whose start a
//     concurrency slot set (WaitedFor "slot"), and of a call that ended
//     waiting for one: the whole wait before the attempt, which is the
//     slot's alone when nothing else made it wait. An attempt that found a
//     free slot at once records nothing.
//   - retry.budget.balance, an observable gauge of {token}: the tokens held
//     by the policy's Budget, when it has a Balance() float64 method as
//     [retry.TokenBucket] does.
//
// retry.result is one of "success_first_attempt", "success_after_hedge" (a
// success that a hedge won: see [retry.HedgeWon]), "success_after_retry" (a
// success of a call that made more than one attempt, hedges included, which
// no hedge won), or the stop reason, read from the
// call's own reason ([retry.Event].Reason), never from the state of its
// context as the call ends:
//
//   - "exhausted": no attempts were left ([retry.ErrExhausted]);
//   - "not_retryable": the error, by its nature, would fail again
//     ([retry.ErrNotRetryable]);
//   - "already_retried": the error came out of an inner retry loop, which
//     had retried it already ([retry.ErrAlreadyRetried]);
//   - "not_idempotent": the attempt may have taken effect and the work is
//     not declared safe to repeat ([retry.ErrNotIdempotent], or a reason
//     that wraps it);
//   - "unrepeatable": the error's Unrepeatable method gave a reason of its
//     own not to repeat the attempt;
//   - "budget_exhausted": the Budget refused the retry
//     ([retry.ErrBudgetExhausted]);
//   - "server_delay": the server asked for a delay above MaxRetryAfter
//     ([retry.ErrServerDelay]);
//   - "no_time_left": the next attempt would not have started before the
//     deadline ([retry.ErrNoTimeLeft]);
//   - "no_slot": no concurrency slot in time, or a full queue of attempts
//     waiting for one ([retry.ErrNoSlot]);
//   - "breaker_open": an open circuit breaker stopped the call (a reason
//     that Is [retry.ErrBreakerOpen]);
//   - "deadline_exceeded": the caller's deadline came, even if its
//     context's timer had not fired yet, or the context ended with a
//     cause that is a deadline (retryhttp's Timeout);
//   - "canceled": the caller's context was cancelled, with or without a
//     cause;
//   - "other": a Limiter's or a Concurrency's own error (a store that is
//     down), or input that made any attempt impossible, such as a nil
//     function.
//
// # Concurrency limits and circuit breakers
//
// A [retry.Concurrency] or a [retry.CircuitBreaker] is shared by every
// call of the policies that hold it, so it is instrumented once, where it
// is made, by [InstrumentConcurrency] and [InstrumentBreaker], not by
// Instrument:
//
//   - retry.concurrency.active, retry.concurrency.limit and
//     retry.concurrency.pending, observable gauges of {attempt}: the
//     Concurrency's InFlight(), Limit() and Waiting(), each when it has the
//     method;
//   - retry.breaker.state, an observable gauge of {state}: a point for each
//     retry.breaker.state, "closed", "open" and "half-open", 1 for the
//     state the breaker is in and 0 for the others;
//   - retry.breaker.transitions, a counter of {transition}: every change of
//     the breaker's state, with retry.breaker.state (the state entered) and
//     retry.breaker.previous_state.
//
// # Hedging
//
// The load that hedging adds to a dependency reads from retry.attempts
// alone: the hedges over the originals (one per call that made an
// attempt) is the hedges sent per call, as the retries over the originals
// is the retries per call. Hedges without error.type are those that
// answered: each won its call, unless another attempt of the call had
// answered first and this one answered too before it could be cut. Those
// with error.type "canceled" were cut, as a rule because another attempt
// won. The types are those of gRFC A96's draft, which labelled
// grpc.client.attempt.started with grpc.attempt_type (less
// "transparent_retry", which a loop that does not see below fn never
// makes); the final A96's per-call grpc.client.call.retries and
// grpc.client.call.hedges sum to the retry and hedge counts here.
//
// # error.type
//
// error.type follows OpenTelemetry's error conventions: it is low-cardinality
// and never holds an error's text. The first rule that holds gives it:
//
//   - the value of an ErrorType() string method of an error in the tree;
//   - the status code of a [retry.ResponseError], "503";
//   - the SQLSTATE of an error with a SQLState() string method, "40001";
//   - "timeout" for context.DeadlineExceeded or a Timeout() method that
//     reports true, "canceled" for context.Canceled;
//   - "connection_reset", "connection_refused", "connection_aborted" and
//     "broken_pipe" for ECONNRESET, ECONNREFUSED, ECONNABORTED and EPIPE;
//   - "unexpected_eof" for io.ErrUnexpectedEOF, "eof" for io.EOF;
//   - else the Go type of the error, named as semconv.ErrorType names it
//     ("*net.DNSError", "*tls.CertificateVerificationError"), looking
//     through fmt.Errorf's %w, [retry.RetryAfter], *url.Error, *net.OpError,
//     *os.SyscallError, and any error of an unexported type that wraps
//     exactly one other and reads exactly as it does: the wrappers that
//     retryhttp, retrygrpc and net/http put around an error to carry what
//     it cannot say. So a failure has one error.type whether it came
//     through retryhttp or through an http.Client. An exported type keeps
//     its name, being one a caller can match with errors.As; a type that
//     means something of its own while reading as its cause names itself
//     with ErrorType.
//
// # Traces
//
// Before each retry, an event named "retry" is added to the span in the
// call's context, if it is recording, with retry.attempt.number (the attempt
// that failed), retry.wait.duration (in seconds), retry.wait.set_by and
// error.type. The event marks the moment the retry was decided, so its
// retry.wait.duration is the wait planned then ([retry.Event].Wait); the
// histogram of the same name records the wait as it went. No span is started: the caller's span, and those of the
// instrumented client that fn uses (otelhttp, otelgrpc), already cover each
// attempt. For the same reason there is no TracerProvider option: the
// events go to whichever provider made the caller's span.
//
// Under retryhttp and otelhttp, [ResendCount] sets http.request.resend_count
// on the client span of each retry, as the HTTP semantic conventions ask.
package retryotel
