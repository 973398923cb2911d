package retryotel_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"

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
