package retryotel

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed93a044d1/retry"
)

// ScopeName is the instrumentation scope of the meter that [Instrument]
// uses: this package's import path. A metric view can select the
// instruments by it.
const ScopeName = "github.com/seed93a044d1/retry/retryotel"

// Option configures [Instrument].
type Option interface {
	apply(*config)
}

type config struct {
	meters metric.MeterProvider
	attrs  []attribute.KeyValue
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider makes [Instrument] record through mp. Without it, or
// with a nil mp, Instrument uses the global provider, otel.GetMeterProvider(),
// as it is when Instrument is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	})
}

// WithAttributes adds attrs to every measurement of the instrumented policy,
// so that two policies, or two dependencies, can be told apart: for
// instance attribute.String("peer.service", "payments"). Keep them few and
// fixed: each distinct set is a time series of its own. Later calls add to
// the attributes of earlier ones. The span events do not carry them: the
// span already says what it is.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) {
		c.attrs = append(c.attrs, attrs...)
	})
}

// Instrument returns a copy of p whose Observe records every attempt, retry
// and call in OpenTelemetry: the metrics listed in the package
// documentation, through a meter of the MeterProvider given by
// [WithMeterProvider] (the global one by default) with scope [ScopeName],
// and an event named "retry" on the span in the call's context before each
// retry. p's own Observe, if set, is kept: it is called after the
// measurements of the same Event are recorded, on the same goroutine.
//
// If p's Budget has a Balance() float64 method, as [retry.TokenBucket]
// does, Instrument also registers an observable gauge that reports it. Its
// callback is registered once per call to Instrument and stays registered
// as long as the MeterProvider lives (until its Shutdown): instrument a
// policy once, where it is declared, not once per call to [retry.Do].
// Instrumenting a policy twice counts everything twice. p's Concurrency and
// Breaker, which other policies may share, are reported on their own, once:
// see [InstrumentConcurrency] and [InstrumentBreaker].
//
// The returned Policy is safe for concurrent use as far as p is. A
// first-try success costs two counter increments and two histogram records
// and no allocation; a retry adds one of each, and allocates only for a
// span event, or to name an error that only its Go type names behind an
// unexported wrapper (see the package documentation); this module's README
// has measured times. An error in making the instruments goes to
// otel.Handle, as otelhttp's do, and the policy records with what it could
// make.
func Instrument(p retry.Policy, opts ...Option) retry.Policy {
	c := configure(opts)
	o := newObserver(c, p.Observe)
	if b, ok := p.Budget.(interface{ Balance() float64 }); ok {
		o.watchBudget(c, b)
	}
	p.Observe = o.observe
	return p
}

// configure applies opts to the default configuration.
func configure(opts []Option) config {
	c := config{meters: otel.GetMeterProvider()}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Instrument and attribute names: see the package documentation for what
// each means and why it exists.
const (
	attemptsName     = "retry.attempts"
	callsName        = "retry.calls"
	callAttemptsName = "retry.call.attempts"
	callDurationName = "retry.call.duration"
	waitDurationName = "retry.wait.duration"
	budgetName       = "retry.budget.balance"

	attemptKindKey    = attribute.Key("retry.attempt.kind")
	resultKey         = attribute.Key("retry.result")
	outcomeUnknownKey = attribute.Key("retry.outcome_unknown")
	waitSetByKey      = attribute.Key("retry.wait.set_by")
	attemptNumberKey  = attribute.Key("retry.attempt.number")

	// retryEventName names the span event added before each retry.
	retryEventName = "retry"
)

// Values of retry.attempt.kind: gRFC A96's attempt types (less its
// "transparent_retry", which a loop that cannot see below fn never makes).
const (
	kindOriginal = iota // the call's first attempt
	kindRetry           // started after a failure, with none of the call's attempts in flight
	kindHedge           // started beside attempts of the call still in flight
	numKinds
)

var kindNames = [numKinds]string{"original", "retry", "hedge"}

// kindOf returns the attempt type of the attempt whose end e reports.
func kindOf(e retry.Event) int {
	switch {
	case e.Hedge:
		return kindHedge
	case e.Attempt > 1:
		return kindRetry
	}
	return kindOriginal
}

// Values of retry.result: how a call ended.
const (
	resultSuccessFirst = iota
	resultSuccessRetried
	resultSuccessHedged
	resultExhausted
	resultNotRetryable
	resultAlreadyRetried
	resultNotIdempotent
	resultUnrepeatable
	resultBudget
	resultServerDelay
	resultNoTimeLeft
	resultNoSlot
	resultBreakerOpen
	resultDeadline
	resultCanceled
	resultOther
	numResults
)

var resultNames = [numResults]string{
	"success_first_attempt",
	"success_after_retry",
	"success_after_hedge",
	"exhausted",
	"not_retryable",
	"already_retried",
	"not_idempotent",
	"unrepeatable",
	"budget_exhausted",
	"server_delay",
	"no_time_left",
	"no_slot",
	"breaker_open",
	"deadline_exceeded",
	"canceled",
	"other",
}

// Values of retry.wait.set_by, as retry.Event.WaitSetBy says them.
var setByNames = [...]string{"backoff", "server", "limiter", "slot"}

// Histogram bucket boundaries, given as advice so that a view can override
// them. The SDK's default boundaries (0, 5, 10, 25, ... 10000) suit
// milliseconds, not seconds nor attempt counts.
var (
	// Attempts per call: each small count apart, 0 for calls whose
	// context ended before their first attempt.
	attemptBuckets = []float64{0, 1, 2, 3, 4, 5, 6, 8, 10, 16, 32}
	// Seconds, from a retry at once to the 5-minute default ceiling on a
	// server's requested delay.
	secondBuckets = []float64{0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// observer records the Events of one instrumented policy. The attribute
// sets that do not depend on an error are built once, here, so that a
// success records without building any.
type observer struct {
	user func(context.Context, retry.Event) // the policy's own Observe

	attempts     metric.Int64Counter
	calls        metric.Int64Counter
	callAttempts metric.Int64Histogram
	callDuration metric.Float64Histogram
	wait         metric.Float64Histogram
	slotWait     metric.Float64Histogram

	attrs []attribute.KeyValue // the user's, from WithAttributes

	attemptOK [numKinds]options   // kind, no error
	result    [numResults]options // result, no error
	setBy     [len(setByNames)]options
	plain     options // the user's attributes alone

	mu       sync.RWMutex
	failures map[failure]options // see failed
}

// options is one attribute set, the user's included, as the option slices
// that Add and Record take. Built once, they cost a measurement nothing:
// a slice passed with ... is not copied, where a single option would be
// put in a new slice that escapes through the interface call.
type options struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newObserver(c config, user func(context.Context, retry.Event)) *observer {
	m := c.meters.Meter(ScopeName)
	o := &observer{user: user, attrs: c.attrs, failures: make(map[failure]options)}
	var err error
	o.attempts, err = m.Int64Counter(attemptsName, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made: the first of each call (original), the retries and the hedges."))
	handle(err)
	o.calls, err = m.Int64Counter(callsName, metric.WithUnit("{call}"),
		metric.WithDescription("Calls ended, by result: success at once, won by a hedge or after retries, or why retrying stopped."))
	handle(err)
	o.callAttempts, err = m.Int64Histogram(callAttemptsName, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made by each call."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	handle(err)
	o.callDuration, err = m.Float64Histogram(callDurationName, metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a call to its end, waits included."),
		metric.WithExplicitBucketBoundaries(secondBuckets...))
	handle(err)
	o.wait, err = m.Float64Histogram(waitDurationName, metric.WithUnit("s"),
		metric.WithDescription("Time really waited before each retry, or until the call ended during the wait; "+
			"not the limiter's wait before a call's first attempt."),
		metric.WithExplicitBucketBoundaries(secondBuckets...))
	handle(err)
	o.slotWait, err = m.Float64Histogram(slotWaitName, metric.WithUnit("s"),
		metric.WithDescription("Time really waited before each attempt whose start a concurrency slot set, "+
			"or until the call ended waiting for one."),
		metric.WithExplicitBucketBoundaries(secondBuckets...))
	handle(err)

	o.plain = o.options()
	for k := range numKinds {
		o.attemptOK[k] = o.options(attemptKindKey.String(kindNames[k]))
	}
	for r := range numResults {
		o.result[r] = o.options(resultKey.String(resultNames[r]))
	}
	for i, name := range setByNames {
		o.setBy[i] = o.options(waitSetByKey.String(name))
	}
	return o
}

// with returns the user's attributes and kvs, as one measurement option.
func (o *observer) with(kvs ...attribute.KeyValue) metric.MeasurementOption {
	all := make([]attribute.KeyValue, 0, len(o.attrs)+len(kvs))
	all = append(append(all, o.attrs...), kvs...)
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// options returns the user's attributes and kvs, as options.
func (o *observer) options(kvs ...attribute.KeyValue) options {
	opt := o.with(kvs...)
	return options{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
}

// watchBudget registers the gauge that reports b's balance at each
// collection.
func (o *observer) watchBudget(c config, b interface{ Balance() float64 }) {
	m := c.meters.Meter(ScopeName)
	g, err := m.Float64ObservableGauge(budgetName, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens held by the retry budget: each retry spends one."))
	if err != nil {
		handle(err)
		return
	}
	set := o.with()
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveFloat64(g, b.Balance(), set)
		return nil
	}, g)
	handle(err)
}

// observe is the instrumented policy's Observe.
func (o *observer) observe(ctx context.Context, e retry.Event) {
	o.waited(ctx, e)
	if e.Done {
		o.done(ctx, e)
	} else {
		o.attempt(ctx, e)
	}
	if o.user != nil {
		o.user(ctx, e)
	}
}

// attempt records the end of an attempt, and the retry that follows it.
func (o *observer) attempt(ctx context.Context, e retry.Event) {
	kind := kindOf(e)
	var errType string
	if e.Err == nil {
		o.attempts.Add(ctx, 1, o.attemptOK[kind].add...)
	} else {
		errType = errorType(e.Err)
		o.attempts.Add(ctx, 1, o.failed(failure{attempt: true, kind: kind, errType: errType}).add...)
	}
	if !e.Retry {
		return
	}
	// The span event marks the decision, with the wait planned; the
	// histogram records the wait as it went, when it ends (see waited).
	setBy := setByIndex(e.WaitSetBy())
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(retryEventName, trace.WithAttributes(
			attemptNumberKey.Int(e.Attempt),
			attribute.Key(waitDurationName).Float64(e.Wait.Seconds()),
			waitSetByKey.String(setByNames[setBy]),
			semconv.ErrorTypeKey.String(errType),
		))
	}
}

// waited records the wait before a retry that e's event ends: the wait
// before its attempt, or, when Done, the wait that the end of the call cut
// short (or that ended just before the call did). That is the time really
// waited, which Do reports, not the wait it planned: a caller's cancel, say,
// cuts a wait short. The Limiter's wait before a call's first attempt is
// not a retry's wait: it counts in retry.call.duration only.
func (o *observer) waited(ctx context.Context, e retry.Event) {
	if e.WaitedFor == "slot" && e.Waited > 0 {
		// Any attempt's, the first's and a hedge's included: an attempt
		// that waits for a slot waits for the dependency's load, whatever
		// made it start.
		o.slotWait.Record(ctx, e.Waited.Seconds(), o.plain.record...)
	}
	switch {
	case e.Done && (e.Attempt == 0 || e.Waited == 0):
		// No retry's wait was under way: the call ended before its first
		// attempt, or after an attempt with no retry decided, or at the
		// very moment a wait began, so that none of it was waited.
		return
	case !e.Done && (e.Attempt <= 1 || e.Hedge):
		// The first attempt is no retry; a hedge starts on the hedge
		// delay, beside an attempt in flight, not after a wait of a retry's.
		return
	}
	// A retry that followed at once waited 0, and Do names no setter for
	// a wait of 0: the backoff is what asked for none.
	o.wait.Record(ctx, e.Waited.Seconds(), o.setBy[setByIndex(e.WaitedFor)].record...)
}

// done records the end of a call.
func (o *observer) done(ctx context.Context, e retry.Event) {
	r := result(ctx, e)
	opts := o.result[r]
	o.callAttempts.Record(ctx, int64(e.Attempt), opts.record...)
	o.callDuration.Record(ctx, e.Elapsed.Seconds(), opts.record...)
	if e.Err == nil {
		o.calls.Add(ctx, 1, opts.add...)
		return
	}
	o.calls.Add(ctx, 1, o.failed(failure{kind: r, errType: callErrorType(e), unknown: e.OutcomeUnknown}).add...)
}

// failure is what the attributes of a failed attempt (attempt set, kind an
// attempt kind) or a failed call (kind a result) depend on.
type failure struct {
	attempt bool
	kind    int
	unknown bool
	errType string
}

// maxFailures bounds the cache of attribute sets for failures. error.type
// is low-cardinality by design, but an ErrorType method is the user's:
// past the bound, a set is built for each measurement instead of kept.
const maxFailures = 256

// failed returns the options for a failure, from the cache if it is there,
// so that a retry that fails as the ones before it did costs no allocation.
func (o *observer) failed(f failure) options {
	o.mu.RLock()
	opts, ok := o.failures[f]
	o.mu.RUnlock()
	if ok {
		return opts
	}
	if f.attempt {
		opts = o.options(attemptKindKey.String(kindNames[f.kind]), semconv.ErrorTypeKey.String(f.errType))
	} else {
		opts = o.options(resultKey.String(resultNames[f.kind]), semconv.ErrorTypeKey.String(f.errType),
			outcomeUnknownKey.Bool(f.unknown))
	}
	o.mu.Lock()
	if len(o.failures) < maxFailures {
		o.failures[f] = opts
	}
	o.mu.Unlock()
	return opts
}

// result says how the call that e ends went, as a retry.result index. It
// reads the call's own reason, never the state of ctx at the moment of the
// event: Do stops as soon as the deadline has come, which may be before the
// context's timer has fired and while ctx.Err() is still nil.
func result(ctx context.Context, e retry.Event) int {
	switch e.Reason {
	case nil:
		if e.Err != nil {
			return resultOther // not from retry.Do, which always gives a failure a Reason
		}
		if retry.HedgeWon(ctx) {
			return resultSuccessHedged
		}
		if e.Attempt > 1 {
			return resultSuccessRetried
		}
		return resultSuccessFirst
	// The sentinels are pointers or comparable values: == cannot panic.
	case retry.ErrExhausted:
		return resultExhausted
	case retry.ErrNotRetryable:
		return resultNotRetryable
	case retry.ErrAlreadyRetried:
		return resultAlreadyRetried
	case retry.ErrNotIdempotent:
		return resultNotIdempotent
	case retry.ErrBudgetExhausted:
		return resultBudget
	case retry.ErrServerDelay:
		return resultServerDelay
	case retry.ErrNoTimeLeft:
		return resultNoTimeLeft
	case retry.ErrNoSlot:
		return resultNoSlot
	case context.DeadlineExceeded:
		return resultDeadline // the caller's deadline, its cause not set or not yet known
	case context.Canceled:
		return resultCanceled
	}
	if errors.Is(e.Reason, retry.ErrBreakerOpen) {
		return resultBreakerOpen // a value with the time it may let attempts through: no sentinel to compare
	}
	// A cause of the caller's own (context.WithCancelCause,
	// WithDeadlineCause, retryhttp's Timeout): a context has a cause only
	// once it has ended, so its Err is settled by now. A cause that says
	// it is a deadline is one, whichever way its context was ended.
	if cause := context.Cause(ctx); same(cause, e.Reason) {
		switch {
		case errors.Is(cause, context.DeadlineExceeded):
			return resultDeadline
		case errors.Is(cause, context.Canceled):
			return resultCanceled
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return resultDeadline
		}
		return resultCanceled
	}
	// A reason that the last error's Unrepeatable method gave.
	if re, ok := e.Err.(*retry.Error); ok && same(refusal(re.Last, 0), e.Reason) {
		if errors.Is(e.Reason, retry.ErrNotIdempotent) {
			return resultNotIdempotent
		}
		return resultUnrepeatable
	}
	return resultOther // a Limiter's or a Concurrency's error, or input that made any attempt impossible
}

// refusal returns what the Unrepeatable method of the outermost error in
// err's tree that has one with an objection returns, as the retry loop
// finds it; nil if none objects.
func refusal(err error, depth int) error {
	if err == nil || depth > maxDepth || isNilPointer(err) {
		return nil
	}
	if u, ok := err.(interface{ Unrepeatable() error }); ok {
		if r := u.Unrepeatable(); r != nil {
			return r
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return refusal(u.Unwrap(), depth+1)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if r := refusal(e, depth+1); r != nil {
				return r
			}
		}
	}
	return nil
}

// same reports whether a and b are the same error. Errors of a type that ==
// cannot compare (a struct holding a slice, say), on which == would panic,
// are the same if they hold the same.
func same(a, b error) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	if reflect.ValueOf(a).Comparable() {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// callErrorType is the error.type of a failed call: its last attempt's, or,
// if no attempt was made, its stop reason's.
func callErrorType(e retry.Event) string {
	if re, ok := e.Err.(*retry.Error); ok {
		if re.Last != nil {
			return errorType(re.Last)
		}
		if re.Reason != nil {
			return errorType(re.Reason)
		}
	}
	return errorType(e.Err)
}

func setByIndex(s string) int {
	switch s {
	case "server":
		return 1
	case "limiter":
		return 2
	case "slot":
		return 3
	}
	return 0
}

func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}
