package retryotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/seed93a044d1/retry"
)

// Instrument and attribute names of the bounds on load: see the package
// documentation.
const (
	activeName      = "retry.concurrency.active"
	limitName       = "retry.concurrency.limit"
	pendingName     = "retry.concurrency.pending"
	slotWaitName    = "retry.slot.wait.duration"
	stateName       = "retry.breaker.state"
	transitionsName = "retry.breaker.transitions"

	stateKey         = attribute.Key("retry.breaker.state")
	previousStateKey = attribute.Key("retry.breaker.previous_state")
)

// The states of a retry.CircuitBreaker, as its State and OnChange name
// them.
var breakerStates = [...]string{"closed", "open", "half-open"}

// The methods of a Concurrency that InstrumentConcurrency reads, each on
// its own: a Concurrency may have any of them.
type (
	inFlighter interface{ InFlight() int }
	limiter    interface{ Limit() int }
	waiter     interface{ Waiting() int }
)

// InstrumentConcurrency reports c in OpenTelemetry, through a meter of the
// MeterProvider given by [WithMeterProvider] (the global one by default)
// with scope [ScopeName], every measurement with the attributes given by
// [WithAttributes]: observable gauges of {attempt} read at each collection,
// one for each of these methods that c has:
//
//   - retry.concurrency.active: InFlight() int, the attempts holding a slot;
//   - retry.concurrency.limit: Limit() int, the slots, which an adaptive
//     Concurrency moves as it learns;
//   - retry.concurrency.pending: Waiting() int, the attempts waiting for a
//     slot.
//
// [retry.ConcurrencyLimit] and adaptive.Concurrency have all three. They are
// gauges, not up-down counters that a query may sum, because a
// Concurrency shared by a fleet reports the same fleet-wide numbers in
// every process that reads it.
//
// c is reported once per call, whatever policies share it: call it once,
// where c is made, not from [Instrument] for each policy. The gauges are
// reported until the returned Registration is unregistered or the
// MeterProvider shuts down. It returns an error, and reports nothing, when
// c has none of the three methods, or when the instruments could not be
// made. It is safe to call from any goroutine, and the methods of c are
// called on the goroutine that collects, so they must be safe for
// concurrent use, as a Concurrency's are.
func InstrumentConcurrency(c retry.Concurrency, opts ...Option) (metric.Registration, error) {
	cfg := configure(opts)
	m := cfg.meters.Meter(ScopeName)
	set := metric.WithAttributeSet(attribute.NewSet(cfg.attrs...))
	type gauge struct {
		g    metric.Int64ObservableGauge
		read func() int
	}
	var (
		gauges []gauge
		errs   []error
	)
	add := func(name, desc string, read func() int) {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit("{attempt}"), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, err)
			return
		}
		gauges = append(gauges, gauge{g, read})
	}
	if c, ok := c.(inFlighter); ok {
		add(activeName, "Attempts holding a concurrency slot.", c.InFlight)
	}
	if c, ok := c.(limiter); ok {
		add(limitName, "Concurrency slots: the most attempts in flight at once.", c.Limit)
	}
	if c, ok := c.(waiter); ok {
		add(pendingName, "Attempts waiting for a concurrency slot.", c.Waiting)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(gauges) == 0 {
		return nil, fmt.Errorf("retryotel: %T has no InFlight, Limit or Waiting method to report", c)
	}
	observables := make([]metric.Observable, len(gauges))
	for i, g := range gauges {
		observables[i] = g.g
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, g := range gauges {
			o.ObserveInt64(g.g, int64(g.read()), set)
		}
		return nil
	}, observables...)
}

// InstrumentBreaker reports b in OpenTelemetry, through a meter of the
// MeterProvider given by [WithMeterProvider] (the global one by default)
// with scope [ScopeName], every measurement with the attributes given by
// [WithAttributes]:
//
//   - retry.breaker.state, an observable gauge of {state}, read at each
//     collection from b.State(time.Now()): one point for each state,
//     retry.breaker.state "closed", "open" or "half-open", 1 for the
//     state b is in and 0 for the two others, so that a query can select
//     the state it watches without knowing which b is in;
//   - retry.breaker.transitions, a counter of {transition}: every change of
//     state, with retry.breaker.state, the state entered, and
//     retry.breaker.previous_state, the one left. An open breaker turns
//     half-open when it is next asked once its OpenFor is over, by an
//     attempt or by a collection of the gauge: the transition counts then.
//
// It counts the transitions through b.OnChange, which it sets to a
// function that counts each change and then calls the OnChange b had, if
// any. So call it after setting b's fields and before b's first use, as a
// CircuitBreaker's fields are set, once for each b: a second call counts
// every transition twice.
//
// The gauge is reported until the returned Registration is unregistered or
// the MeterProvider shuts down; the transitions are counted as long as b
// lives, into nothing once the MeterProvider has shut down. It returns an
// error when the instruments could not be made, and then leaves
// b.OnChange as it was. b must not be nil.
func InstrumentBreaker(b *retry.CircuitBreaker, opts ...Option) (metric.Registration, error) {
	cfg := configure(opts)
	m := cfg.meters.Meter(ScopeName)
	state, err := m.Int64ObservableGauge(stateName, metric.WithUnit("{state}"),
		metric.WithDescription("The circuit breaker's state: 1 for the one it is in, 0 for the others."))
	if err != nil {
		return nil, err
	}
	transitions, err := m.Int64Counter(transitionsName, metric.WithUnit("{transition}"),
		metric.WithDescription("Changes of the circuit breaker's state, by the state entered and the one left."))
	if err != nil {
		return nil, err
	}
	with := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		all := append(append([]attribute.KeyValue(nil), cfg.attrs...), kvs...)
		return metric.WithAttributeSet(attribute.NewSet(all...))
	}
	// The attribute sets are built once: OnChange runs under b's lock.
	var (
		inState [len(breakerStates)]metric.ObserveOption
		changed [len(breakerStates)][len(breakerStates)][]metric.AddOption
	)
	for i, s := range breakerStates {
		inState[i] = with(stateKey.String(s))
		for j, to := range breakerStates {
			changed[i][j] = []metric.AddOption{with(stateKey.String(to), previousStateKey.String(s))}
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := stateIndex(b.State(time.Now()))
		for i := range breakerStates {
			v := int64(0)
			if i == now {
				v = 1
			}
			o.ObserveInt64(state, v, inState[i])
		}
		return nil
	}, state)
	if err != nil {
		return nil, err
	}
	user := b.OnChange
	b.OnChange = func(from, to string, at time.Time) {
		if i, j := stateIndex(from), stateIndex(to); i >= 0 && j >= 0 {
			transitions.Add(context.Background(), 1, changed[i][j]...)
		}
		if user != nil {
			user(from, to, at)
		}
	}
	return reg, nil
}

// stateIndex returns the index of a breaker state's name, -1 for a name
// that retry.CircuitBreaker does not give.
func stateIndex(s string) int {
	for i, name := range breakerStates {
		if s == name {
			return i
		}
	}
	return -1
}
