package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// overBound measures sorted times against a bound on every window of
// length w: it returns the most times in any window [t, t+w), and how many
// times fall in at least one window of length w holding more than bound.
// Only windows that start at one of the times need looking at: a window
// holding more than bound, moved forward to its first time, still holds
// every time it held.
func overBound(sorted []time.Duration, w time.Duration, bound int) (most, above int) {
	// marks[i] > 0 when time i is in a window above the bound: a window
	// [j, k) adds 1 at j and takes it off at k.
	marks := make([]int, len(sorted)+1)
	k := 0
	for j, t := range sorted {
		k = max(k, j)
		for k < len(sorted) && sorted[k] < t+w {
			k++
		}
		most = max(most, k-j)
		if k-j > bound {
			marks[j]++
			marks[k]--
		}
	}
	in := 0
	for i := range sorted {
		in += marks[i]
		if in > 0 {
			above++
		}
	}
	return most, above
}

// windowBound is what a limit of rate with burst allows in any window of
// length w: rate x w + burst, rounded down.
func windowBound(rate float64, burst int, w time.Duration) int {
	return int(math.Floor(rate*w.Seconds()+1e-9)) + burst
}

// measuredWindows are the windows the drill measures the limit on.
var measuredWindows = []time.Duration{100 * time.Millisecond, time.Second}

// reportWindows prints, for each measured window, the most admissions in
// any window of that length against rate x window + burst, and the share
// of admissions above it.
func reportWindows(w io.Writer, sorted []time.Duration, rate float64, burst int) {
	for _, win := range measuredWindows {
		bound := windowBound(rate, burst, win)
		most, above := overBound(sorted, win, bound)
		share := 0.0
		if len(sorted) > 0 {
			share = float64(above) / float64(len(sorted))
		}
		fmt.Fprintf(w, "  in any %v: at most %d admitted, against rate x window + burst = %d; %d of %d attempts (%.2f%%) in a window above it\n",
			win, most, bound, above, len(sorted), 100*share)
	}
}

// dropCost returns the throughput, as time at the limit's rate, that the
// fleet did not get from the drop at from to the end of the run at end,
// (end - from) - admitted/rate, and the longest time in it without an
// admission.
func dropCost(sorted []time.Duration, from, end time.Duration, rate float64) (cost, gap time.Duration) {
	in := window(sorted, from, end)
	cost = end - from - time.Duration(float64(len(in))/rate*float64(time.Second))
	last := from
	for _, t := range in {
		gap = max(gap, t-last)
		last = t
	}
	return cost, max(gap, end-last)
}

// parseDelay reads the flag name's value (-delay, -back-delay): "lo-hi"
// (0-100ms, 10ms-50ms) or one duration, a fixed delay.
func parseDelay(name, s string) (lo, hi time.Duration, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ranged := strings.Cut(s, "-")
	if !ranged {
		b = a
	}
	unit := strings.TrimLeft(b, "0123456789.")
	if _, err := time.ParseDuration(a); err != nil && unit != "" {
		a += unit // "0-100ms": the low end takes the high end's unit
	}
	if lo, err = time.ParseDuration(a); err == nil {
		hi, err = time.ParseDuration(b)
	}
	if err != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("outage: %s must be a duration or a range lo-hi of them (0-100ms), not %q", name, s)
	}
	return lo, hi, nil
}
