package retryotel_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

// One line instruments a policy. Here the metrics go to a ManualReader, to
// print them; a program gives an exporter's reader to its MeterProvider, or
// sets the global one and leaves out WithMeterProvider.
func ExampleInstrument() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	policy := retryotel.Instrument(retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)},
		retryotel.WithMeterProvider(provider),
		retryotel.WithAttributes(attribute.String("peer.service", "payments")))

	ctx := context.Background()
	_ = retry.Do(ctx, func(context.Context) error { return nil }, policy)
	calls := 0
	_ = retry.Do(ctx, func(context.Context) error {
		if calls++; calls <= 2 {
			return syscall.ECONNRESET
		}
		return nil
	}, policy)
	_ = retry.Do(ctx, func(context.Context) error { return syscall.ECONNREFUSED }, policy)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, p := range sum.DataPoints {
				lines = append(lines, fmt.Sprintf("%s %s: %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// retry.attempts error.type=connection_refused,peer.service=payments,retry.attempt.kind=original: 1
	// retry.attempts error.type=connection_refused,peer.service=payments,retry.attempt.kind=retry: 2
	// retry.attempts error.type=connection_reset,peer.service=payments,retry.attempt.kind=original: 1
	// retry.attempts error.type=connection_reset,peer.service=payments,retry.attempt.kind=retry: 1
	// retry.attempts peer.service=payments,retry.attempt.kind=original: 1
	// retry.attempts peer.service=payments,retry.attempt.kind=retry: 1
	// retry.calls error.type=connection_refused,peer.service=payments,retry.outcome_unknown=false,retry.result=exhausted: 1
	// retry.calls peer.service=payments,retry.result=success_after_retry: 1
	// retry.calls peer.service=payments,retry.result=success_first_attempt: 1
}

// Hedging shows as hedging: each attempt is counted with its type,
// "original", "retry" or "hedge", so the extra load that hedging put on the
// dependency is the hedges over the originals. Here the second of two calls
// answers only when it is cut, so a hedge starts after 50ms and wins.
func ExampleInstrument_hedging() {
	reader := sdkmetric.NewManualReader()
	policy := retryotel.Instrument(retry.Policy{HedgeDelay: retry.Constant(50 * time.Millisecond), AttemptInContext: true},
		retryotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	ctx := context.Background()
	_ = retry.Do(ctx, func(context.Context) error { return nil }, policy)
	_ = retry.Do(ctx, func(ctx context.Context) error {
		if retry.AttemptFrom(ctx) == 1 {
			<-ctx.Done() // the original stalls until the hedge wins
			return ctx.Err()
		}
		return nil
	}, policy)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	byType := map[string]int64{}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "retry.attempts" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			kind, _ := p.Attributes.Value("retry.attempt.kind")
			byType[kind.AsString()] += p.Value
			lines = append(lines, fmt.Sprintf("%s: %d", p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("hedges per call: %.2f\n", float64(byType["hedge"])/float64(byType["original"]))
	// Output:
	// error.type=canceled,retry.attempt.kind=original: 1
	// retry.attempt.kind=hedge: 1
	// retry.attempt.kind=original: 1
	// hedges per call: 0.50
}

// One line, where the limit is made, reports its slots in OpenTelemetry:
// the attempts in flight, the limit and the attempts waiting for a slot.
// A policy that shares the limit is instrumented as any other.
func ExampleInstrumentConcurrency() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	limit := &retry.ConcurrencyLimit{Slots: 8}
	if _, err := retryotel.InstrumentConcurrency(limit, retryotel.WithMeterProvider(provider)); err != nil {
		fmt.Println(err)
	}
	release, _ := limit.Acquire(context.Background(), time.Time{}) // an attempt in flight
	defer release(0, nil)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Printf("%s: %d\n", m.Name, m.Data.(metricdata.Gauge[int64]).DataPoints[0].Value)
	}
	// Output:
	// retry.concurrency.active: 1
	// retry.concurrency.limit: 8
	// retry.concurrency.pending: 0
}

// A circuit breaker is instrumented after its fields are set and before it
// is used: its state is read at each collection, and its changes of state
// are counted.
func ExampleInstrumentBreaker() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	breaker := &retry.CircuitBreaker{Failures: 1, OpenFor: time.Hour}
	if _, err := retryotel.InstrumentBreaker(breaker, retryotel.WithMeterProvider(provider)); err != nil {
		fmt.Println(err)
	}
	done, _ := breaker.Allow(time.Now())
	done(time.Now(), syscall.ECONNRESET) // one failure opens it

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Gauge[int64]:
			for _, p := range data.DataPoints {
				lines = append(lines, fmt.Sprintf("%s %s: %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
			}
		case metricdata.Sum[int64]:
			for _, p := range data.DataPoints {
				lines = append(lines, fmt.Sprintf("%s %s: %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// retry.breaker.state retry.breaker.state=closed: 0
	// retry.breaker.state retry.breaker.state=half-open: 0
	// retry.breaker.state retry.breaker.state=open: 1
	// retry.breaker.transitions retry.breaker.previous_state=closed,retry.breaker.state=open: 1
}
