package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/svg"
)

// chartBin is the width of the bins of the simulated drill's
// attempts-per-second charts: fine enough to show a wave of retries that all
// come due at the same instant. The live drill runs at a tenth of the times,
// so its bins are a tenth as wide.
const chartBin = 100 * time.Millisecond

// drillStudy runs the drill's variants, prints the comparison and writes one
// chart per variant.
func drillStudy(c config, stdout, stderr io.Writer) ([]string, error) {
	variants := sim.DrillVariants(c.seed)
	results := make([]sim.DrillResult, len(variants))
	for i, v := range variants {
		v.Jobs = c.jobs
		fmt.Fprintf(stderr, "drill: %s\n", v.Name)
		results[i] = sim.RunDrill(v)
	}
	given := variants[0]
	fmt.Fprintf(stdout, "\nOUTAGE DRILL: %d notification jobs queued at t = 0 meet a provider outage (virtual time, seed %d)\n", c.jobs, c.seed)
	fmt.Fprintf(stdout, "Provider: down until %v (it never answers: each attempt times out at the policy's AttemptTimeout),\n", given.Outage)
	fmt.Fprintf(stdout, "  then serves %d requests per 1-second window; above that, 429 with Retry-After = seconds until the window\n", given.Capacity)
	fmt.Fprintf(stdout, "  resets, rounded up (always 1 s). %.0f%% of served replies are lost (the worker times out and retries with the same\n", 100*given.LostReplies)
	fmt.Fprintf(stdout, "  idempotency key; the provider answers 200 without sending twice).\n")
	fmt.Fprintf(stdout, "Policy as given: MaxAttempts 5, Exponential{Base: 500ms, Cap: 30s} full jitter, AttemptTimeout 2s,\n")
	fmt.Fprintf(stdout, "  rate.NewLimiter(200, 20) for every attempt. The scheduler stores each job's next attempt time from retry.Next;\n")
	fmt.Fprintf(stdout, "  when a job comes due it reserves a limiter token and is sent after the reservation's delay (a FIFO queue).\n")
	fmt.Fprintf(stdout, "  The budget variant adds retry.NewBudget(0.1, 0): 10%% of first attempts, no per-second floor.\n\n")
	writeSummaryTable(stdout, results)

	fmt.Fprintf(stdout, "\nNotes per variant:\n")
	for _, r := range results {
		var parts []string
		for _, rc := range r.DeadByReason() {
			parts = append(parts, fmt.Sprintf("%d %s", rc.Count, strings.TrimPrefix(rc.Reason.Error(), "retry: ")))
		}
		dead := "no dead letters"
		if len(parts) > 0 {
			dead = "dead letters: " + strings.Join(parts, ", ")
		}
		sentDead := r.Sent - r.Summary.Delivered
		fmt.Fprintf(stdout, "  %-22s %s; attempts timed out in the outage: %d; throttled (429): %d, of which retried after Retry-After: %d; replies lost: %d",
			r.Name+":", dead, r.Count(sim.Down), r.Count(sim.Throttled), r.RetriedAfter(sim.Throttled), r.Count(sim.LostReply))
		if sentDead > 0 {
			fmt.Fprintf(stdout, "; %d dead-lettered jobs were in fact sent (reply lost): replay them with the same key", sentDead)
		}
		fmt.Fprintln(stdout)
	}

	// One chart per variant, on the same axes so that they compare at a glance.
	var xMax float64
	for _, r := range results {
		xMax = max(xMax, r.Summary.Drain.Seconds())
	}
	xMax = math.Ceil(xMax/10) * 10
	var files []string
	for i, r := range results {
		times := make([]time.Duration, len(r.Attempts))
		for j, a := range r.Attempts {
			times[j] = a.At
		}
		v := variants[i]
		ch := attemptsChart(fmt.Sprintf("Drill, %s: attempts per second at the provider", r.Name), times, chartBin, v.Outage, v.Capacity, v.Policy.Limiter, xMax)
		name := filepath.Join(c.out, "drill-"+slug(r.Name)+".svg")
		if err := ch.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// attemptsChart draws attempts per second over time, on a log axis shared by
// every drill chart: a flat 200/s and a wave of 10,000 in 100 ms both stay
// readable.
func attemptsChart(title string, times []time.Duration, bin, outage time.Duration, capacity int, lim *rate.Limiter, xMax float64) svg.Chart {
	rates := sim.PerSecond(times, bin)
	s := svg.Series{Name: "attempts/s", Color: "#0072B2"}
	for i, v := range rates {
		// Each bin is drawn as a step, so a burst reads as a spike, not a slope.
		x0 := (time.Duration(i) * bin).Seconds()
		x1 := (time.Duration(i+1) * bin).Seconds()
		s.X = append(s.X, x0, x1)
		s.Y = append(s.Y, v, v)
	}
	rules := []svg.Rule{{Y: float64(capacity), Label: fmt.Sprintf("capacity %d/s", capacity)}}
	if lim != nil {
		rules = append(rules, svg.Rule{Y: float64(lim.Limit()), Label: fmt.Sprintf("limiter %g/s", float64(lim.Limit())), LabelBelow: true})
	}
	return svg.Chart{
		Title:  title,
		XLabel: "time since the outage began, s",
		YLabel: fmt.Sprintf("attempts per second (%v bins, log scale)", bin),
		Series: []svg.Series{s},
		Bands:  []svg.Band{{X0: 0, X1: outage.Seconds(), Label: "provider down"}},
		Rules:  rules,
		LogY:   true, YMin: 1, YMax: 1e6,
		XMin: 0, XMax: xMax,
	}
}

// writeSummaryTable prints one row per drill result.
func writeSummaryTable(w io.Writer, results []sim.DrillResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tdelivered\tdead-lettered\tattempts\tretries/delivered\tpeak attempts/s\tdrain\tp50 latency\tp99 latency\tduplicates suppressed\t")
	for _, r := range results {
		s := r.Summary
		rpd := "-"
		if v := s.RetriesPerDelivered(); !math.IsNaN(v) {
			rpd = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t\n",
			r.Name, s.Delivered, s.DeadLettered, s.Attempts, rpd, s.PeakPerSecond,
			secs(s.Drain), latency(s, s.P50), latency(s, s.P99), s.Duplicates)
	}
	tw.Flush()
	fmt.Fprintln(w, "(retries/delivered: every retry, those of dead-lettered jobs included, per delivered job; peak: most attempts in any")
	fmt.Fprintln(w, " 1-second sliding window; drain: until the last job was delivered or dead-lettered; latency: from t = 0 to delivery)")
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func latency(s sim.Summary, d time.Duration) string {
	if s.Delivered == 0 {
		return "-"
	}
	return secs(d)
}

// slug turns a variant's name into a file name part: "no jitter, no
// limiter" becomes "no-jitter-no-limiter", "10% budget" "10pct-budget".
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(strings.ReplaceAll(name, "%", "pct")) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}
