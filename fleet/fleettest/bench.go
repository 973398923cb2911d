package fleettest

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ReportDurations reports the median and the 99th percentile of ds, in
// microseconds, as the benchmark's metrics "p50-us" and "p99-us".
func ReportDurations(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-us")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e3, "p99-us")
}

// ReportLoad reports the machine's load average over the last minute, as
// the metric "load1": benchmarks on a shared machine mean little without it.
func ReportLoad(b *testing.B) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	if f, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64); err == nil {
		b.ReportMetric(f, "load1")
	}
}

// CPUTime returns the CPU time this process has used, user and system.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report reports a Drill's result as metrics: the attempts per second over
// the Duration ("attempts/s"), that against the limit ("x-rate"), and the
// most attempts in any second ("max-1s").
func (r Result) Report(b *testing.B) {
	b.ReportMetric(float64(len(r.Starts))/r.Duration.Seconds(), "attempts/s")
	b.ReportMetric(float64(len(r.Starts))/r.Duration.Seconds()/r.Rate, "x-rate")
	b.ReportMetric(float64(r.MostWithin(time.Second)), "max-1s")
}
