package sim

import (
	"math"
	"slices"
	"time"
)

// RateBin is the one bin of every per-second rate the drill reports: the
// table's peaks and the charts' lines both count events in whole clock
// seconds [k s, (k+1) s) since the start of the run. A count per one-second
// bin is a rate per second with no scaling, so the table and the charts
// cannot disagree.
const RateBin = time.Second

// PerSecond returns the number of times (in any order) that fall in each
// clock second: out[k] counts the times in [k s, (k+1) s). It covers every
// second from 0 up to the one holding the latest time, and at least
// [0, until), so that the series of one chart line up; a second with no
// time in it counts 0, and a negative time counts in second 0. It returns
// nil for no times and no until.
func PerSecond(times []time.Duration, until time.Duration) []int {
	n := 0
	if until > 0 {
		n = int((until + RateBin - 1) / RateBin)
	}
	for _, t := range times {
		n = max(n, bin(t)+1)
	}
	if n == 0 {
		return nil
	}
	out := make([]int, n)
	for _, t := range times {
		out[bin(t)]++
	}
	return out
}

func bin(t time.Duration) int { return int(max(t, 0) / RateBin) }

// PeakPerSecond returns the largest count of [PerSecond]: the most times in
// any one clock second. It is 0 for no times.
func PeakPerSecond(times []time.Duration) int {
	return peakFrom(times, 0)
}

// peakFrom is PeakPerSecond over the clock seconds that start at or after
// from only: the peak once an outage ending at from was over.
func peakFrom(times []time.Duration, from time.Duration) int {
	first := int((max(from, 0) + RateBin - 1) / RateBin)
	peak := 0
	for k, n := range PerSecond(times, 0) {
		if k >= first {
			peak = max(peak, n)
		}
	}
	return peak
}

// Summary is the drill's report, for the simulation and the live run alike.
type Summary struct {
	Jobs         int
	Delivered    int
	DeadLettered int
	Attempts     int
	// Duplicates is the number of attempts whose key had already been sent:
	// notifications the idempotency key kept from going out twice.
	Duplicates int
	// PeakPerSecond is the most attempts that reached the provider in one
	// clock second ([PeakPerSecond]); PeakUp is the same over the seconds
	// from the first that starts at or after the outage's end.
	PeakPerSecond int
	PeakUp        int
	Drain         time.Duration // until the last job was delivered or dead-lettered
	P50, P99      time.Duration // delivery latency (from queueing) of the delivered jobs
}

// RetriesPerDelivered returns every retry made (those of dead-lettered jobs
// included) divided by the jobs delivered: what each delivery cost in
// retries. It is NaN when nothing was delivered.
func (s Summary) RetriesPerDelivered() float64 {
	if s.Delivered == 0 {
		return math.NaN()
	}
	return float64(s.Attempts-s.Jobs) / float64(s.Delivered)
}

// Summarize builds a Summary from the attempt times (in any order), the end
// of the outage, the delivery latencies, the number of dead letters and the
// drain time.
func Summarize(jobs int, outage time.Duration, attempts, latencies []time.Duration, deadLettered int, drain time.Duration) Summary {
	s := Summary{
		Jobs:          jobs,
		Delivered:     len(latencies),
		DeadLettered:  deadLettered,
		Attempts:      len(attempts),
		PeakPerSecond: PeakPerSecond(attempts),
		PeakUp:        peakFrom(attempts, outage),
		Drain:         drain,
	}
	lat := slices.Clone(latencies)
	slices.Sort(lat)
	s.P50 = Percentile(lat, 0.50)
	s.P99 = Percentile(lat, 0.99)
	return s
}

// Percentile returns the nearest-rank percentile q (0 < q <= 1) of sorted
// values: the smallest value with at least a fraction q of the values at or
// below it. It is 0 for no values.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
