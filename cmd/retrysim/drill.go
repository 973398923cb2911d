package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/svg"
)

// drillStudy runs the drill's variants, prints the comparison and what each
// variant shows, and writes one chart per variant.
func drillStudy(c config, stdout, stderr io.Writer) ([]string, error) {
	variants := sim.DrillVariants(c.seed)
	results := make([]sim.DrillResult, len(variants))
	for i := range variants {
		variants[i].Jobs = c.jobs
		fmt.Fprintf(stderr, "drill: %s\n", variants[i].Name)
		results[i] = sim.RunDrill(variants[i])
	}
	given := variants[0]
	fmt.Fprintf(stdout, "\nOUTAGE DRILL: %s notification jobs queued at t = 0 meet a provider outage (virtual time, seed %d)\n", count(c.jobs), c.seed)
	fmt.Fprintf(stdout, "Provider: down until %v, and silent: each attempt times out at the policy's AttemptTimeout. Then it serves\n", given.Outage)
	fmt.Fprintf(stdout, "  %d requests per clock second and answers 429 above that, with Retry-After: 1 (the time until its next\n", given.Capacity)
	fmt.Fprintf(stdout, "  clock second, rounded up to whole seconds). %.0f%% of served replies are lost: the worker times out and\n", 100*given.LostReplies)
	fmt.Fprintf(stdout, "  retries with the same idempotency key, which the provider answers 200 without sending twice.\n")
	writeWrapped(stdout, "Policy as given: ", policyAsGiven+". A scheduler stores each job's next attempt time from retry.Next "+
		"instead of sleeping on it; a job that comes due takes a limiter token and goes out after the token's delay.", 114)
	fmt.Fprintf(stdout, "Variants, each the policy as given with one thing changed (River's default replaces it):\n")
	width := 0
	for _, v := range variants[1:] {
		width = max(width, len(v.Name))
	}
	for _, v := range variants[1:] {
		writeWrapped(stdout, fmt.Sprintf("  %-*s  ", width, v.Name), v.Change, 114)
	}

	writeOutcomeTable(stdout, results)
	writeLoadTable(stdout, results)
	lessons := drillLessons(results)
	fmt.Fprintf(stdout, "\nWhat each variant shows:\n")
	for _, r := range results {
		writeWrapped(stdout, "  "+r.Name+": ", lessons[r.Name], 114)
	}
	writeDrillNotes(stdout, results)

	// One chart per variant, each with its axes scaled to its own data.
	var files []string
	for i, r := range results {
		v := variants[i]
		down := "provider down"
		if v.DownRetryAfter {
			down = "provider down: 503 + Retry-After"
		}
		ch := drillChart(r, v.Capacity, sim.LimitOf(v.Policy.Limiter), down, lessons[r.Name])
		ch.Note = drillNote(v)
		name := filepath.Join(c.out, "drill-"+slug(r.Name)+".svg")
		if err := ch.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// policyAsGiven is the drill's policy under test, which each variant
// changes in one thing; DrillVariants builds it.
const policyAsGiven = "MaxAttempts 5, Exponential{Base: 500ms, Cap: 30s} (full jitter), AttemptTimeout 2s, " +
	"rate.NewLimiter(200, 20) for every attempt"

// drillNote is what a drill chart says at its foot so that it stands alone:
// what "as given" is, what this variant changes, and the provider's model.
// (The legend says when a dead letter is counted.)
func drillNote(v sim.DrillConfig) string {
	variant := "This chart is the policy as given."
	switch v.Name {
	case sim.DrillNames.AsGiven:
	case sim.DrillNames.River:
		variant = fmt.Sprintf("This variant replaces the policy with %s.", v.Change)
	default:
		variant = fmt.Sprintf("This variant changes one thing: %s.", v.Change)
	}
	down := fmt.Sprintf("silent for the first %g s (each attempt times out)", v.Outage.Seconds())
	if v.DownRetryAfter {
		down = fmt.Sprintf("down for the first %g s", v.Outage.Seconds())
	}
	return fmt.Sprintf("\"As given\" is the policy under test: %s. %s The provider is %s, then serves %d requests "+
		"a second and answers 429 above that; %s jobs are queued at 0 s.", policyAsGiven, variant, down, v.Capacity, count(v.Jobs))
}

// writeOutcomeTable prints what became of the jobs, one row per result.
func writeOutcomeTable(w io.Writer, results []sim.DrillResult) {
	fmt.Fprintf(w, "\nWhat became of the jobs\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tdelivered\tdead-lettered\tdrain\tp50 latency\tp99 latency\tduplicates suppressed\t")
	for _, r := range results {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Name, count(s.Delivered), count(s.DeadLettered), secs(s.Drain), latency(s, s.P50), latency(s, s.P99), count(s.Duplicates))
	}
	tw.Flush()
	fmt.Fprintln(w, "(drain: until the last job was delivered or dead-lettered; latency: from t = 0 to delivery; duplicates suppressed:")
	fmt.Fprintln(w, " attempts whose notification had already been sent, which the idempotency key kept from going out twice)")
}

// writeLoadTable prints what the provider saw, one row per result.
func writeLoadTable(w io.Writer, results []sim.DrillResult) {
	fmt.Fprintf(w, "\nWhat the provider saw\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tattempts\tin the outage\t429s\tretries/delivery\tRetry-After waits\tpeak attempts/s\tpeak once back\t")
	for _, r := range results {
		s := r.Summary
		rpd := "-"
		if v := s.RetriesPerDelivered(); !math.IsNaN(v) {
			rpd = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Name, count(s.Attempts), count(r.InOutage()), count(r.Count(sim.Throttled)), rpd, count(len(r.ServerWaits)), count(s.PeakPerSecond), count(s.PeakUp))
	}
	tw.Flush()
	fmt.Fprintln(w, "(in the outage: attempts that met the provider down; retries/delivery: every retry, those of dead-lettered")
	fmt.Fprintln(w, " jobs included, per delivered job; Retry-After waits: retries whose wait the server's delay made longer than the")
	fmt.Fprintln(w, " backoff's; peak: the most attempts in one clock second [k s, k+1 s), the bins the charts draw; once back: from")
	fmt.Fprintln(w, " the first second the provider is up)")
}

// writeDrillNotes prints, per result, the dead letters by reason and the
// lost replies.
func writeDrillNotes(w io.Writer, results []sim.DrillResult) {
	fmt.Fprintf(w, "\nDead letters and lost replies:\n")
	for _, r := range results {
		var parts []string
		for _, rc := range r.DeadByReason() {
			parts = append(parts, fmt.Sprintf("%s %s", count(rc.Count), strings.TrimPrefix(rc.Reason.Error(), "retry: ")))
		}
		dead := "no dead letters"
		if len(parts) > 0 {
			dead = "dead-lettered: " + strings.Join(parts, ", ")
		}
		line := fmt.Sprintf("%s; replies lost: %s", dead, count(r.Count(sim.LostReply)))
		if sentDead := r.Sent - r.Summary.Delivered; sentDead > 0 {
			were := "were"
			if sentDead == 1 {
				were = "was"
			}
			line += fmt.Sprintf("; %s %s in fact sent (the reply was lost): replay with the same key", plural(sentDead, "dead-lettered job"), were)
		}
		writeWrapped(w, "  "+r.Name+": ", line, 114)
	}
}

// deadSeries names the dead letters on a drill chart, each counted in the
// second of its last attempt (sim.DrillResult.DeadTimes), so that a
// second's dead letters are some of its attempts.
const deadSeries = "dead-lettered (at last attempt)"

// Chart colours: Okabe and Ito's colour-blind-safe palette.
const (
	colorAttempts  = "#0072B2"
	colorDelivered = "#009E73"
	colorThrottled = "#E69F00"
	colorDead      = "#000000"
	colorServer    = "#CC79A7"
	colorLimiter   = "#555555"
)

// drillChart draws what reached the provider, second by second: attempts,
// deliveries, 429s, dead letters and the waits the server's Retry-After
// set, each counted in the clock seconds of sim.PerSecond, the bins behind
// the table's peaks. The axes fit the run: time from 0 to the drain, rounded
// up to a whole second (to 5 s past 10 s); a linear y axis from 0 to the
// chart's own largest value, so an empty second is drawn at 0, where it is.
// Series with nothing in them are left out. down labels the outage.
func drillChart(r sim.DrillResult, capacity int, limit float64, down, lesson string) svg.Chart {
	until := r.Summary.Drain
	series := []svg.Series{steps("attempts", colorAttempts, false, sim.PerSecond(r.Times(), until))}
	for _, s := range []svg.Series{
		steps("delivered", colorDelivered, true, sim.PerSecond(r.Times(sim.Sent, sim.Duplicate), until)),
		steps("429 Too Many Requests", colorThrottled, false, sim.PerSecond(r.Times(sim.Throttled), until)),
		steps(deadSeries, colorDead, true, sim.PerSecond(r.DeadTimes(), until)),
		steps("waits set by Retry-After", colorServer, true, sim.PerSecond(r.ServerWaits, until)),
	} {
		if slicesMax(s.Y) > 0 {
			series = append(series, s)
		}
	}
	if len(r.LimiterRate) > 0 {
		series = append(series, learnedRate(r.LimiterRate))
	}
	rules := []svg.Rule{{Y: float64(capacity), Label: fmt.Sprintf("provider capacity %d/s", capacity)}}
	if limit > 0 {
		rules = append(rules, svg.Rule{Y: limit, Label: fmt.Sprintf("limiter %g/s", limit), LabelBelow: true, Color: colorLimiter})
	}
	xMax := math.Ceil(until.Seconds())
	if xMax > 10 {
		xMax = math.Ceil(xMax/5) * 5
	}
	return svg.Chart{
		Title:    fmt.Sprintf("Outage drill, %s: what reached the provider, per second", r.Name),
		Subtitle: lesson,
		XLabel:   "seconds since the outage began (one-second bins)",
		YLabel:   "per second",
		Width:    960, Height: 540,
		Series:   series,
		Bands:    []svg.Band{{X0: 0, X1: r.Outage.Seconds(), Label: down}},
		Rules:    rules,
		XMin:     0,
		XMax:     max(1, xMax),
		Headroom: 0.06, // room for the labels at the top
	}
}

// steps draws per-second counts as steps, each second flat from its start to
// its end, so that a burst reads as a block, not a slope.
func steps(name, color string, dashed bool, counts []int) svg.Series {
	s := svg.Series{Name: name, Color: color, Dashed: dashed}
	for k, n := range counts {
		x0 := (time.Duration(k) * sim.RateBin).Seconds()
		x1 := (time.Duration(k+1) * sim.RateBin).Seconds()
		s.X = append(s.X, x0, x1)
		s.Y = append(s.Y, float64(n), float64(n))
	}
	return s
}

// learnedSeries names an adaptive limiter's rate on a drill chart.
const learnedSeries = "adaptive limiter's rate"

// learnedRate draws an adaptive limiter's rate, per clock second, as steps
// like the counts; a second in which it paced no booking (none made, or
// before its first 429) is a gap, not a 0.
func learnedRate(rates []float64) svg.Series {
	s := svg.Series{Name: learnedSeries, Color: colorLimiter}
	for k, v := range rates {
		if !(v > 0) {
			v = math.NaN()
		}
		x0 := (time.Duration(k) * sim.RateBin).Seconds()
		s.X = append(s.X, x0, x0+sim.RateBin.Seconds())
		s.Y = append(s.Y, v, v)
	}
	return s
}

func slicesMax(ys []float64) float64 {
	m := 0.0
	for _, y := range ys {
		m = max(m, y)
	}
	return m
}

// writeWrapped prints prefix and text wrapped to width columns, the lines
// after the first indented under the text.
func writeWrapped(w io.Writer, prefix, text string, width int) {
	indent := strings.Repeat(" ", len(prefix))
	line := prefix
	fresh := true
	for _, word := range strings.Fields(text) {
		if !fresh && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line, fresh = indent, true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	fmt.Fprintln(w, line)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func latency(s sim.Summary, d time.Duration) string {
	if s.Delivered == 0 {
		return "-"
	}
	return secs(d)
}

// count formats n with thousands separators: 10000 as "10,000".
func count(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// slug turns a variant's name into a file name part: "no jitter, no
// limiter" becomes "no-jitter-no-limiter", "10% budget" "10pct-budget",
// "River's default" "rivers-default".
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(strings.NewReplacer("%", "pct", "'", "").Replace(name)) {
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

// budgetRefusals returns the retries a budget refused and when the first was.
func budgetRefusals(r sim.DrillResult) (n int, first time.Duration) {
	first = -1
	for _, d := range r.DeadLetters {
		if d.Reason == retry.ErrBudgetExhausted {
			if n == 0 {
				first = d.At
			}
			n++
		}
	}
	return n, first
}
