package otelstdout_test

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/otelstdout"
	"github.com/seed93a044d1/retry/retryotel"
)

// One call that the server refuses for good, and the metrics it leaves, as
// the stdout exporter writes them at Shutdown. So that the output can be
// checked, the example leaves out the resource (host, process, SDK version)
// and drops the three histograms, whose values are times; a real program
// keeps both. (The test file checks a call that is retried: its counters
// have a data point per kind of attempt, which the exporter writes in no
// fixed order.)
func Example() {
	drop := func(name string) sdkmetric.Option {
		return sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: name},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}))
	}
	provider, err := otelstdout.NewMeterProvider(os.Stdout, sdkmetric.WithResource(resource.Empty()),
		drop("retry.call.duration"), drop("retry.wait.duration"), drop("retry.call.attempts"))
	if err != nil {
		fmt.Println(err)
		return
	}
	policy := retryotel.Instrument(retry.Policy{Backoff: retry.Constant(0)},
		retryotel.WithMeterProvider(provider),
		retryotel.WithAttributes(attribute.String("peer.service", "prices")))

	_ = retry.Do(context.Background(), func(context.Context) error {
		return retry.Permanent(syscall.ECONNREFUSED)
	}, policy)
	if err := provider.Shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {
	// 	"Resource": null,
	// 	"ScopeMetrics": [
	// 		{
	// 			"Scope": {
	// 				"Name": "github.com/seed93a044d1/retry/retryotel",
	// 				"Version": "",
	// 				"SchemaURL": "",
	// 				"Attributes": null
	// 			},
	// 			"Metrics": [
	// 				{
	// 					"Name": "retry.attempts",
	// 					"Description": "Attempts made: the first of each call (original), the retries and the hedges.",
	// 					"Unit": "{attempt}",
	// 					"Data": {
	// 						"DataPoints": [
	// 							{
	// 								"Attributes": [
	// 									{
	// 										"Key": "error.type",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "connection_refused"
	// 										}
	// 									},
	// 									{
	// 										"Key": "peer.service",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "prices"
	// 										}
	// 									},
	// 									{
	// 										"Key": "retry.attempt.kind",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "original"
	// 										}
	// 									}
	// 								],
	// 								"StartTime": "0001-01-01T00:00:00Z",
	// 								"Time": "0001-01-01T00:00:00Z",
	// 								"Value": 1
	// 							}
	// 						],
	// 						"Temporality": "CumulativeTemporality",
	// 						"IsMonotonic": true
	// 					}
	// 				},
	// 				{
	// 					"Name": "retry.calls",
	// 					"Description": "Calls ended, by result: success at once, won by a hedge or after retries, or why retrying stopped.",
	// 					"Unit": "{call}",
	// 					"Data": {
	// 						"DataPoints": [
	// 							{
	// 								"Attributes": [
	// 									{
	// 										"Key": "error.type",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "connection_refused"
	// 										}
	// 									},
	// 									{
	// 										"Key": "peer.service",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "prices"
	// 										}
	// 									},
	// 									{
	// 										"Key": "retry.outcome_unknown",
	// 										"Value": {
	// 											"Type": "BOOL",
	// 											"Value": false
	// 										}
	// 									},
	// 									{
	// 										"Key": "retry.result",
	// 										"Value": {
	// 											"Type": "STRING",
	// 											"Value": "not_retryable"
	// 										}
	// 									}
	// 								],
	// 								"StartTime": "0001-01-01T00:00:00Z",
	// 								"Time": "0001-01-01T00:00:00Z",
	// 								"Value": 1
	// 							}
	// 						],
	// 						"Temporality": "CumulativeTemporality",
	// 						"IsMonotonic": true
	// 					}
	// 				}
	// 			]
	// 		}
	// 	]
	// }
}
