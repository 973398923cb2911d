package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed93a044d1/retry/internal/sim/hedging"
	"github.com/seed93a044d1/retry/internal/svg"
)

// hedgeRuns is the hedging study's runs: every variant under both loads.
type hedgeRuns struct {
	normal, overload []hedging.Result
	configs          []hedging.Config // the normal load's, for their Change
	// noCancel is the hedge at the p95 at normal load against a server
	// that no cancellation reaches: what cancellation saves.
	noCancel hedging.Result
}

// runHedging runs the study's variants under both loads on c.workers
// goroutines.
func runHedging(c config) hedgeRuns {
	normal := hedging.Variants(hedging.Normal, c.seed)
	overload := hedging.Variants(hedging.Overload, c.seed)
	noCancel := hedging.Variants(hedging.Normal, c.seed)[1]
	noCancel.Name += ", never cancelled"
	noCancel.Server.CancelDelay = -1
	all := append(append(append([]hedging.Config{}, normal...), overload...), noCancel)
	for i := range all {
		all[i].Calls = c.calls
	}
	res := hedging.RunAll(all, c.workers)
	return hedgeRuns{normal: res[:len(normal)], overload: res[len(normal) : 2*len(normal)], configs: normal, noCancel: res[len(res)-1]}
}

// hedgingStudy runs the hedging study, prints its tables and what they
// show, and writes its charts.
func hedgingStudy(c config, stdout, stderr io.Writer) ([]string, error) {
	fmt.Fprintf(stderr, "hedging: %d runs of %s calls\n", 2*len(hedging.Variants(hedging.Normal, 0))+1, count(c.calls))
	start := time.Now()
	runs := runHedging(c)
	elapsed := time.Since(start)
	srv := hedging.StudyServer()
	tail := srv.Latency
	fmt.Fprintf(stdout, "\nHEDGING STUDY: %s calls against a server with a heavy tail, under two loads (virtual time, seed %d, %v of computation)\n",
		count(c.calls), c.seed, elapsed.Round(time.Millisecond))
	writeWrapped(stdout, "Server: ", fmt.Sprintf("%d workers. Each attempt needs %s to %s of a worker's time; %.0f%% of them first stall %s to %s, "+
		"holding no worker (a disk, a lock held elsewhere): so 98%% take about 5 ms and 2%% about 1 s, as the BigTable reads of "+
		"\"The Tail at Scale\". It serves %s attempts a second; up to %d wait for a worker, first come first served, and more are "+
		"answered 503 at once. A cancellation reaches it %s after the client cancels: an attempt still stalled or waiting then "+
		"never runs, one running stops; until then a loser is load like any attempt.",
		srv.Workers, dur(tail.WorkMin), dur(tail.WorkMax), 100*tail.Slow, dur(tail.StallMin), dur(tail.StallMax), count(int(srv.Capacity())), srv.Queue,
		dur(srv.CancelDelay)), 114)
	writeWrapped(stdout, "Calls: ", fmt.Sprintf("arrive at random (Poisson), each with a %s deadline, each retry.Do under its variant's "+
		"Policy, modelled by the core's rules (internal/sim/hedging/model.go, checked against retry.Do in a synctest bubble): hedges count "+
		"against MaxAttempts (4) and withdraw from the Budget, the first success cancels the others, a 503 is retried or, with "+
		"others in flight, replaced. p95 = %s rounds up the p95 of the calls without hedging at half the capacity (%s).",
		dur(hedging.CallTimeout), dur(hedging.P95), ms(runs.normal[0].Quantile(0.95))), 114)
	fmt.Fprintf(stdout, "Variants:\n")
	width := 0
	for _, v := range runs.configs {
		width = max(width, len(v.Name))
	}
	for _, v := range runs.configs {
		writeWrapped(stdout, fmt.Sprintf("  %-*s  ", width, v.Name), v.Change, 114)
	}

	fmt.Fprintf(stdout, "\nAt %s (%s calls a second)\n", hedging.Normal.Name, count(int(hedging.Normal.Rate())))
	writeHedgeTable(stdout, runs.normal)
	fmt.Fprintf(stdout, "\n%s: %s calls a second, %.2f times its capacity\n", capitalize(hedging.Overload.Name),
		count(int(hedging.Overload.Rate())), hedging.Overload.Load)
	writeHedgeTable(stdout, runs.overload)
	fmt.Fprintln(stdout, "(latency: of the calls that succeeded, from their start; extra load: attempts per call - 1, hedges and retries;")
	fmt.Fprintln(stdout, " hedged: calls that started a hedge; work: the server's worker time per call, a loser's until its")
	fmt.Fprintln(stdout, " cancellation arrived; shed: attempts answered 503 because the queue was full; delay: the mean hedge delay used)")

	l := hedgingLessons(runs)
	fmt.Fprintf(stdout, "\nWhat the hedging study shows:\n")
	writeWrapped(stdout, "  the tail: ", l.tail, 114)
	writeWrapped(stdout, "  its cost: ", l.cost, 114)
	writeWrapped(stdout, "  overloaded: ", l.overload, 114)
	writeWrapped(stdout, "  in short: ", l.conclusion, 114)

	charts := []struct {
		file  string
		chart svg.Chart
	}{
		{"hedging-latency.svg", latencyChart(runs.normal, fmt.Sprintf("Hedging at %s: the latency of the calls, by percentile", hedging.Normal.Name), l.tail)},
		{"hedging-overload-latency.svg", latencyChart(runs.overload, "Hedging, overloaded: the latency of the calls that succeeded, by percentile", l.overloadLatency)},
		{"hedging-overload-load.svg", loadChart(runs.overload, l.overload)},
	}
	var files []string
	for _, ch := range charts {
		ch.chart.Note += hedgingNote
		name := filepath.Join(c.out, ch.file)
		if err := ch.chart.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// hedgingNote is the model, at the foot of each hedging chart.
var hedgingNote = fmt.Sprintf("The model: calls arrive at random, each with a 2 s deadline, against a server of %d workers whose "+
	"attempts take 4-6 ms of work, 2%% of them after a stall of about 1 s that holds no worker; %s attempts a second at most, "+
	"%d more may queue, beyond that 503. A cancellation reaches the server 1 ms after the client cancels. p95 = %s. "+
	"Budget: retry.NewBudget(0.1, 0); adaptive hedge: &adaptive.Hedge{}.",
	hedging.Workers, count(int(hedging.StudyServer().Capacity())), hedging.Backlog, dur(hedging.P95))

// writeHedgeTable prints one row per variant.
func writeHedgeTable(w io.Writer, results []hedging.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tsucceeded\tp50\tp99\tp99.9\textra load\thedged\twork/call\tshed\tdelay\t")
	for _, r := range results {
		delay := "-"
		if r.HedgeDelay > 0 {
			delay = ms(r.HedgeDelay)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, pct(float64(r.Succeeded())/float64(r.Calls)),
			ms(r.Quantile(0.5)), ms(r.Quantile(0.99)), ms(r.Quantile(0.999)), pct(r.ExtraLoad()),
			pct(float64(r.HedgedCalls)/float64(r.Calls)), ms(r.Work/time.Duration(max(r.Calls, 1))), count(r.Shed), delay)
	}
	tw.Flush()
}

// ms formats a latency: "5.01 ms", "11.9 ms", "1.09 s".
func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f ms", float64(d)/1e6)
}

// dur formats a set duration with no more digits than it has: "6 ms",
// "0.9 s", "2 s".
func dur(d time.Duration) string {
	if d >= time.Second || d%(100*time.Millisecond) == 0 && d > 0 {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(float64(d)/1e6, 'f', -1, 64) + " ms"
}

// pct formats a fraction as a percentage with one decimal.
func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// hedgeLessons is what the hedging study shows, in plain words built from
// the runs' numbers.
type hedgeLessons struct {
	tail, cost, overload, overloadLatency, conclusion string
}

// hedgingLessons says what the runs show. A claim that depends on which
// way the numbers went is made only when they went that way.
func hedgingLessons(runs hedgeRuns) hedgeLessons {
	find := func(rs []hedging.Result, name string) hedging.Result {
		for _, r := range rs {
			if r.Name == name {
				return r
			}
		}
		return hedging.Result{Name: name}
	}
	n := func(name string) hedging.Result { return find(runs.normal, name) }
	o := func(name string) hedging.Result { return find(runs.overload, name) }
	p999 := func(r hedging.Result) time.Duration { return r.Quantile(0.999) }
	cut := func(from, to hedging.Result) string {
		if p999(to) <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(p999(from))/float64(p999(to)))
	}
	none, fixed, learned, rot := n(hedging.Names.None), n(hedging.Names.Fixed), n(hedging.Names.AdaptiveBudget), n(hedging.Names.RetryOnTimeout)
	var out hedgeLessons

	out.tail = fmt.Sprintf("Without hedging, 1 call in 50 waits out a stall: p99 %s, p99.9 %s. Hedging at the p95 (%s) cuts the p99.9 to %s, "+
		"%s times lower, for %s more attempts; the adaptive hedge, which its default floor holds at %s here, to %s (%s times) for %s.",
		ms(none.Quantile(0.99)), ms(p999(none)), dur(hedging.P95), ms(p999(fixed)), cut(none, fixed), pct(fixed.ExtraLoad()),
		ms(learned.HedgeDelay), ms(p999(learned)), cut(none, learned), pct(learned.ExtraLoad()))
	met := true
	for _, name := range []string{hedging.Names.Fixed, hedging.Names.FixedBudget, hedging.Names.Adaptive, hedging.Names.AdaptiveBudget} {
		r := n(name)
		met = met && 10*p999(r) <= p999(none) && r.ExtraLoad() <= 0.05
	}
	if met {
		out.tail += " Every hedging variant cuts the p99.9 at least 10 times for no more than 5% more attempts."
	}
	if math.Abs(float64(p999(rot)-p999(fixed))) <= 0.1*float64(p999(fixed)) {
		out.tail += fmt.Sprintf(" Retrying on a %s timeout does as well at this load (%s, %s more attempts): nothing queues, so the attempts it cuts were stalled ones.",
			dur(hedging.P95), ms(p999(rot)), pct(rot.ExtraLoad()))
	} else {
		out.tail += fmt.Sprintf(" Retrying on a %s timeout gives %s for %s more attempts.", dur(hedging.P95), ms(p999(rot)), pct(rot.ExtraLoad()))
	}

	workPer := func(r hedging.Result) time.Duration { return r.Work / time.Duration(max(r.Calls, 1)) }
	work := fmt.Sprintf("%s without hedging and %s hedging at the p95", ms(workPer(none)), ms(workPer(fixed)))
	if ms(workPer(none)) == ms(workPer(fixed)) {
		work = fmt.Sprintf("%s with hedging as without", ms(workPer(none)))
	}
	out.cost = fmt.Sprintf("Nor do the hedges cost the server work: its work per call is %s, because the losers are stalled "+
		"attempts whose cancellation reaches it before they take a worker; were it never to reach it, %s.", work,
		ms(workPer(runs.noCancel)))

	oNone, oFixed, oFixedB := o(hedging.Names.None), o(hedging.Names.Fixed), o(hedging.Names.FixedBudget)
	oLearned, oLearnedB, oRot, oBudget := o(hedging.Names.Adaptive), o(hedging.Names.AdaptiveBudget), o(hedging.Names.RetryOnTimeout), o(hedging.Names.BudgetOnly)
	per := func(r hedging.Result) string { return fmt.Sprintf("%.2f", r.AttemptsPerCall()) }
	succeeded := func(r hedging.Result) string { return pct(float64(r.Succeeded()) / float64(max(r.Calls, 1))) }
	than := "no more than"
	if oFixedB.Attempts > oNone.Attempts {
		than = "more than"
	}
	out.overload = fmt.Sprintf("Overloaded, the queue holds every attempt past the p95, so every hedge delay and timeout fires. Without a budget, "+
		"hedging at the p95 sends %s attempts a call (%s without hedging, whose 503s are retried), the adaptive hedge %s (its delay "+
		"rose to %s with the queue), and retrying on timeout %s, and then only %s of its calls succeed. With the budget, hedging sends "+
		"%s a call, %s without hedging (%s), and %s the budget alone (%s): under overload the budget, not the delay, holds the load, "+
		"for hedges and retries alike.",
		per(oFixed), per(oNone), per(oLearned), ms(oLearned.HedgeDelay), per(oRot), succeeded(oRot),
		per(oFixedB), than, per(oNone), sameOrNot(oFixedB, oBudget), per(oBudget))
	out.overloadLatency = fmt.Sprintf("Overloaded, latency is the queue's: p50 %s without hedging, %s hedging at the p95 with the budget. "+
		"The budget costs calls: %s succeed with it, %s without hedging or budget, since a call whose attempt was shed gets no retry "+
		"once the budget is spent; retrying on timeout leaves %s.",
		ms(oNone.Quantile(0.5)), ms(oFixedB.Quantile(0.5)), succeeded(oFixedB), succeeded(oNone), succeeded(oRot))
	_ = oLearnedB

	out.conclusion = fmt.Sprintf("Hedge reads at about the p95 and give the policy a budget: at normal load it cuts the p99.9 %s times for %s more "+
		"attempts, and overloaded it sends %s attempts a call where a policy that only retries sends %s. Do not retry on a short "+
		"timeout instead: it is as good until the queue grows, and then it resends every call.",
		cut(none, fixed), pct(fixed.ExtraLoad()), per(oFixedB), per(oNone))
	return out
}

// sameOrNot compares the attempts of a and b: "as many as", "fewer than",
// "more than".
func sameOrNot(a, b hedging.Result) string {
	switch d := float64(a.Attempts-b.Attempts) / float64(max(b.Attempts, 1)); {
	case math.Abs(d) < 0.005:
		return "about as many as"
	case d < 0:
		return "fewer than"
	default:
		return "more than"
	}
}

// nines is where a percentile is drawn: 1 for p90, 2 for p99, 3 for p99.9.
func nines(q float64) float64 { return -math.Log10(1 - q) }

// latencyChart draws, for each variant, its calls' latency against the
// percentile, in nines, on a log axis: the tail is the right of the chart.
// A variant whose line is another's exactly is named with it, not drawn
// over it; one with fewer than 1% of its calls succeeded is named in the
// note, not drawn.
func latencyChart(results []hedging.Result, title, lesson string) svg.Chart {
	var series []svg.Series
	var left []string
	for _, r := range results {
		if r.Succeeded() < r.Calls/100 {
			left = append(left, fmt.Sprintf("%s (%s of its calls succeeded)", r.Name, pct(float64(r.Succeeded())/float64(r.Calls))))
			continue
		}
		s := svg.Series{Name: r.Name, Dashed: r.Name == hedging.Names.RetryOnTimeout || strings.HasSuffix(r.Name, "budget"), Color: hedgeColor(r.Name)}
		for x := nines(0.5); x <= 4.0001; x += 0.05 {
			q := 1 - math.Pow(10, -x)
			s.X = append(s.X, x)
			s.Y = append(s.Y, float64(r.Quantile(q))/1e6)
		}
		same := slices.IndexFunc(series, func(o svg.Series) bool { return slices.Equal(o.Y, s.Y) })
		if same >= 0 {
			if r.Name == series[same].Name+", budget" {
				series[same].Name += " (and with budget)"
			} else {
				series[same].Name += " = " + r.Name
			}
			continue
		}
		series = append(series, s)
	}
	ch := svg.Chart{
		Title: title, Subtitle: lesson,
		XLabel: "percentile, in nines: 1 = p90, 2 = p99, 3 = p99.9, 4 = p99.99",
		YLabel: "latency, ms (log scale)",
		Width:  960, Height: 560,
		Series: series, LogY: true, XMin: 0, XMax: 4,
	}
	if len(left) > 0 {
		ch.Note = "Not drawn: " + strings.Join(left, ", ") + ". "
	}
	return ch
}

// loadChart draws the attempts that reach the overloaded server each
// second, by variant, against its capacity and the calls' rate.
func loadChart(results []hedging.Result, lesson string) svg.Chart {
	var series []svg.Series
	end := 0.0
	for _, r := range results {
		series = append(series, svg.Series{
			Name: r.Name, Dashed: strings.HasSuffix(r.Name, "budget"), Color: hedgeColor(r.Name),
			X: steps("", "", false, r.PerSecond).X, Y: steps("", "", false, r.PerSecond).Y,
		})
		end = max(end, float64(len(r.PerSecond)))
	}
	return svg.Chart{
		Title:    "Hedging, overloaded: the attempts that reach the server, per second",
		Subtitle: lesson,
		XLabel:   "seconds (one-second bins)", YLabel: "attempts per second",
		Width: 960, Height: 560, Series: series,
		Rules: []svg.Rule{
			{Y: hedging.StudyServer().Capacity(), Label: fmt.Sprintf("capacity %s/s", count(int(hedging.StudyServer().Capacity()))), LabelBelow: true},
			{Y: hedging.Overload.Rate(), Label: fmt.Sprintf("calls %s/s", count(int(hedging.Overload.Rate()))), Color: colorLimiter},
		},
		XMin: 0, XMax: end, Headroom: 0.06,
	}
}

// hedgeColor gives each variant the same colour on every chart; a
// variant and its budgeted twin share one, the twin dashed.
func hedgeColor(name string) string {
	switch strings.TrimSuffix(name, ", budget") {
	case hedging.Names.None:
		return "#000000"
	case hedging.Names.Fixed:
		return "#0072B2"
	case hedging.Names.Adaptive:
		return "#009E73"
	case hedging.Names.RetryOnTimeout:
		return "#D55E00"
	}
	return "#CC79A7"
}
