// Package otelstdout sends the metrics of retried calls to standard output
// with OpenTelemetry's stdout exporter
// (go.opentelemetry.io/otel/exporters/stdout/stdoutmetric): the smallest
// working setup of retryotel, to see what it records before wiring a real
// exporter (OTLP, Prometheus) in the same place.
//
// retryotel.Instrument is called once, where the policy is declared; the
// MeterProvider is the program's, here given with WithMeterProvider (a
// program that sets the global provider with otel.SetMeterProvider before
// calling Instrument needs no option).
package otelstdout

import (
	"io"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// NewMeterProvider returns a MeterProvider whose metrics are written to w
// as JSON, each time its reader exports them (every minute, and once more
// at Shutdown), with the given options (views, a resource).
func NewMeterProvider(w io.Writer, opts ...sdkmetric.Option) (*sdkmetric.MeterProvider, error) {
	exporter, err := stdoutmetric.New(stdoutmetric.WithWriter(w), stdoutmetric.WithPrettyPrint(), stdoutmetric.WithoutTimestamps())
	if err != nil {
		return nil, err
	}
	opts = append([]sdkmetric.Option{sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter))}, opts...)
	return sdkmetric.NewMeterProvider(opts...), nil
}
