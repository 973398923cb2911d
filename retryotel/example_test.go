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
	policy := retryotel.Instrument(retry.Policy{Hedge: retry.Constant(50 * time.Millisecond), NumberAttempts: true},
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
