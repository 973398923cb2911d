package otelstdout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/examples/otelstdout"
	"github.com/seed93a044d1/retry/retryotel"
)

// A call retried twice before it succeeds leaves, in what the exporter
// writes, three attempts (one original, two retries, the failed ones with
// their error.type) and one call that succeeded after retrying.
func TestExportedCounters(t *testing.T) {
	var out bytes.Buffer
	provider, err := otelstdout.NewMeterProvider(&out)
	require.NoError(t, err)
	policy := retryotel.Instrument(retry.Policy{Backoff: retry.Constant(0)}, retryotel.WithMeterProvider(provider))
	attempts := 0
	err = retry.Do(t.Context(), func(context.Context) error {
		if attempts++; attempts <= 2 {
			return syscall.ECONNRESET
		}
		return nil
	}, policy)
	require.NoError(t, err)
	require.NoError(t, provider.Shutdown(t.Context()))

	var exported struct {
		ScopeMetrics []struct {
			Metrics []struct {
				Name string
				Data struct {
					DataPoints []struct {
						Attributes []struct {
							Key   string
							Value struct{ Value any }
						}
						Value any
					}
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &exported), "the exporter wrote:\n%s", out.String())
	got := map[string]float64{}
	for _, sm := range exported.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "retry.attempts" && m.Name != "retry.calls" {
				continue
			}
			for _, p := range m.Data.DataPoints {
				key := m.Name
				for _, a := range p.Attributes {
					key += " " + a.Key + "=" + a.Value.Value.(string)
				}
				v, _ := p.Value.(float64)
				got[key] = v
			}
		}
	}
	assert.Equal(t, map[string]float64{
		"retry.attempts error.type=connection_reset retry.attempt.kind=original": 1,
		"retry.attempts error.type=connection_reset retry.attempt.kind=retry":    1,
		"retry.attempts retry.attempt.kind=retry":                                1,
		"retry.calls retry.result=success_after_retry":                           1,
	}, got)
}
