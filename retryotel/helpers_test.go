package retryotel_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryotel"
)

var errReset = syscall.ECONNRESET

// telemetry is a real OpenTelemetry SDK pipeline: a meter provider read by
// a ManualReader and a tracer provider whose spans a SpanRecorder keeps.
// Neither starts a goroutine, so both work inside a synctest bubble.
type telemetry struct {
	reader *sdkmetric.ManualReader
	meters *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	return &telemetry{
		reader: reader,
		meters: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		spans:  spans,
		tracer: tp.Tracer("test"),
	}
}

// instrument instruments p with this pipeline's meter provider.
func (tl *telemetry) instrument(p retry.Policy, opts ...retryotel.Option) retry.Policy {
	return retryotel.Instrument(p, append([]retryotel.Option{retryotel.WithMeterProvider(tl.meters)}, opts...)...)
}

// collect reads every metric recorded so far.
func (tl *telemetry) collect(t *testing.T) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tl.reader.Collect(context.Background(), &rm))
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, retryotel.ScopeName, sm.Scope.Name)
		for _, md := range sm.Metrics {
			m[md.Name] = md
		}
	}
	return m
}

// metrics holds one collection, by instrument name.
type metrics map[string]metricdata.Metrics

// key renders an attribute set as "k=v,k=v", sorted by key.
func key(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sums returns the points of the counter name, by attribute set.
func (m metrics) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return nil
	}
	sum, ok := md.Data.(metricdata.Sum[int64])
	require.Truef(t, ok, "%s is a %T, want a Sum[int64]", name, md.Data)
	require.True(t, sum.IsMonotonic)
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[key(p.Attributes)] = p.Value
	}
	return out
}

// hist is a histogram point: its count and sum.
type hist struct {
	Count uint64
	Sum   float64
}

// histograms returns the points of the histogram name, by attribute set.
func (m metrics) histograms(t *testing.T, name string) map[string]hist {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return nil
	}
	out := map[string]hist{}
	switch h := md.Data.(type) {
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			out[key(p.Attributes)] = hist{p.Count, float64(p.Sum)}
		}
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			out[key(p.Attributes)] = hist{p.Count, p.Sum}
		}
	default:
		t.Fatalf("%s is a %T, want a Histogram", name, md.Data)
	}
	return out
}

// gauge returns the points of the float gauge name, by attribute set.
func (m metrics) gauge(t *testing.T, name string) map[string]float64 {
	t.Helper()
	md, ok := m[name]
	if !ok {
		return nil
	}
	g, ok := md.Data.(metricdata.Gauge[float64])
	require.Truef(t, ok, "%s is a %T, want a Gauge[float64]", name, md.Data)
	out := map[string]float64{}
	for _, p := range g.DataPoints {
		out[key(p.Attributes)] = p.Value
	}
	return out
}

// failing returns a function that fails n times with err, then succeeds.
func failing(n int, err error) func(context.Context) error {
	calls := 0
	return func(context.Context) error {
		if calls++; calls <= n {
			return err
		}
		return nil
	}
}

// always returns a function that always fails with err.
func always(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

var errBoom = errors.New("boom")
