// Command retryotel uses retryotel as a user installs it: an instrumented
// policy whose metrics are read back through the OpenTelemetry SDK.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

func main() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	policy := retryotel.Instrument(retry.Policy{Backoff: retry.Constant(0)}, retryotel.WithMeterProvider(provider))

	ctx := context.Background()
	attempts := 0
	err := retry.Do(ctx, func(context.Context) error {
		if attempts++; attempts < 3 {
			return syscall.ECONNRESET
		}
		return nil
	}, policy)
	if err != nil {
		fail("retry.Do: %v", err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fail("collect: %v", err)
	}
	var recorded int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "retry.attempts" {
				for _, p := range sum.DataPoints {
					recorded += p.Value
				}
			}
		}
	}
	if recorded != 3 {
		fail("retry.attempts = %d, want 3", recorded)
	}
	fmt.Println("retry.attempts: 3 recorded for a call that succeeded at its third attempt")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
