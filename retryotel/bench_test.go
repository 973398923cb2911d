package retryotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

// The cost of instrumenting a policy, against the same policy bare:
//
//	cd retryotel && go test -run '^$' -bench . -benchmem -count 6
func BenchmarkInstrument(b *testing.B) {
	bare := retry.Policy{Backoff: retry.Constant(0)}
	sdk := retryotel.Instrument(bare, retryotel.WithMeterProvider(
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	unset := retryotel.Instrument(bare, retryotel.WithMeterProvider(noop.NewMeterProvider()))
	ok := func(context.Context) error { return nil }
	ctx := context.Background()

	for _, bc := range []struct {
		name   string
		policy retry.Policy
	}{
		{"first-try success/bare", bare},
		{"first-try success/sdk", sdk},
		{"first-try success/noop provider", unset},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := retry.Do(ctx, ok, bc.policy); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	for _, bc := range []struct {
		name   string
		policy retry.Policy
	}{
		{"two failures then success/bare", bare},
		{"two failures then success/sdk", sdk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := retry.Do(ctx, failing(2, errReset), bc.policy); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	// The span events: each call runs in a fresh recording span, so that
	// the events of one do not pile up in the next; the span alone is
	// measured too, to subtract.
	// No processor: the spans record, but none is kept.
	tp := sdktrace.NewTracerProvider()
	tracer := tp.Tracer("bench")
	b.Run("span alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(ctx, "call")
			span.End()
		}
	})
	b.Run("two failures then success/sdk, recording span", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sctx, span := tracer.Start(ctx, "call")
			if err := retry.Do(sctx, failing(2, errReset), sdk); err != nil {
				b.Fatal(err)
			}
			span.End()
		}
	})

	b.Run("first-try success/sdk, parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := retry.Do(ctx, ok, sdk); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
