package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim/ingest"
	"github.com/seed93a044d1/retry/internal/svg"
)

// newAdaptive returns a fresh adaptive concurrency limit, told nothing,
// for the ingestion study's adaptive variants.
func newAdaptive() ingest.Slots { return &adaptive.Concurrency{} }

// ingestRuns is the ingestion study's runs.
type ingestRuns struct {
	sweep    []ingest.Result // the fixed limits, FixedSizes in order
	best     int             // the fixed limit chosen in hindsight: ingest.FixedSizes[best]
	variants []ingest.Result // first scenario: no bound, rate limit, the best fixed, adaptive, adaptive + breaker
	configs  []ingest.Config // the variants', for their Change
	// halves and doubles are the variants when C halves, or doubles, at
	// ingest.ChangeAt; the fixed limit is the first scenario's best.
	halves, doubles []ingest.Result
}

// ingestNames returns the variants the study runs.
func ingestNames() []string {
	return []string{ingest.Names.None, ingest.Names.Rate, ingest.Names.Fixed, ingest.Names.Adaptive, ingest.Names.AdaptiveBreaker}
}

// runIngest runs the sweep, then the variants under the three storages,
// each batch on c.workers goroutines.
func runIngest(c config) ingestRuns {
	st := ingest.StudyStorage()
	sized := func(cs []ingest.Config) []ingest.Config {
		for i := range cs {
			cs[i].Writes = c.writes
		}
		return cs
	}
	var sweep []ingest.Config
	for _, n := range ingest.FixedSizes {
		sweep = append(sweep, ingest.Variant(ingest.Names.Fixed, st, c.seed, n, nil))
	}
	var runs ingestRuns
	runs.sweep = ingest.RunAll(sized(sweep), c.workers)
	runs.best = ingest.Best(runs.sweep)
	slots := ingest.FixedSizes[runs.best]
	variants := func(st ingest.Storage) []ingest.Config {
		var cs []ingest.Config
		for _, name := range ingestNames() {
			cs = append(cs, ingest.Variant(name, st, c.seed, slots, newAdaptive))
		}
		return sized(cs)
	}
	runs.configs = variants(st)
	all := append(append(variants(st), variants(ingest.Changed(ingest.StorageSlots/2))...), variants(ingest.Changed(2*ingest.StorageSlots))...)
	res := ingest.RunAll(all, c.workers)
	n := len(runs.configs)
	runs.variants, runs.halves, runs.doubles = res[:n], res[n:2*n], res[2*n:]
	return runs
}

// ingestStudy runs the ingestion-pipeline study, prints its tables and
// what they show, and writes its charts.
func ingestStudy(c config, stdout, stderr io.Writer) ([]string, error) {
	fmt.Fprintf(stderr, "ingest: %d runs of %s writes\n", len(ingest.FixedSizes)+3*len(ingestNames()), count(c.writes))
	start := time.Now()
	runs := runIngest(c)
	elapsed := time.Since(start)
	st := ingest.StudyStorage()
	fmt.Fprintf(stdout, "\nINGESTION PIPELINE: a storage outage leaves a backlog of %s writes (virtual time, seed %d, %v of computation)\n",
		count(c.writes), c.seed, elapsed.Round(time.Millisecond))
	writeWrapped(stdout, "Storage: ", fmt.Sprintf("down for the first %s, refusing every write at once (connection refused). Then it "+
		"serves C = %d writes at once, each in %s to %s: %s writes a second. Above C, writes queue, first come first served, "+
		"unbounded, so their latency grows with the queue; a write whose client has timed out is still done when its turn "+
		"comes (wasted work), since nothing tells the storage.", dur(st.Outage), st.Slots, dur(st.WorkMin), dur(st.WorkMax),
		count(int(st.Capacity(st.Slots)))), 114)
	writeWrapped(stdout, "Pipeline: ", fmt.Sprintf("the writes arrive evenly over the outage; %s writers take them in order, one "+
		"each, and store each by retry's rules (modelled in internal/sim/ingest, the decisions the library's: retry.Next, the "+
		"Limiter, the Concurrency, the Breaker): %s. A call the breaker stops is put back for the time it names.",
		count(ingest.Writers), ingestPolicy), 114)
	fmt.Fprintf(stdout, "Variants, each that policy with one bound:\n")
	width := 0
	for _, v := range runs.configs {
		width = max(width, len(v.Name))
	}
	for _, v := range runs.configs {
		writeWrapped(stdout, fmt.Sprintf("  %-*s  ", width, v.Name), v.Change, 114)
	}

	fmt.Fprintf(stdout, "\nFixed limits, swept (C = %d)\n", st.Slots)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "slots\tdrain\tpeak in flight\tp99 latency\ttimed out\tattempts\t")
	for i, r := range runs.sweep {
		mark := ""
		if i == runs.best {
			mark = " (best)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t\n", count(ingest.FixedSizes[i]), mark, drainOf(r), count(r.Peak), ms(r.Quantile(0.99)), count(r.TimedOut), count(r.Attempts))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "(best: the soonest drain, and of those within 1%% of it the lowest p99: chosen in hindsight, knowing C)\n")

	fmt.Fprintf(stdout, "\nThe backlog after the outage (C = %d)\n", st.Slots)
	writeIngestTable(stdout, runs.variants, runs.sweep[runs.best], ingest.FixedSizes[runs.best], st)
	fmt.Fprintln(stdout, "(drain: from the storage's return to the last write stored; in flight: writes the storage holds, in service")
	fmt.Fprintln(stdout, " and queued, those whose client has gone included; after 10 s: from 10 s after its return; p99: of the attempts")
	fmt.Fprintln(stdout, " once it is back, as their writers saw them, a timeout counting as the timeout; timed out: attempts whose")
	fmt.Fprintln(stdout, " writer gave up, whose work the storage did anyway; in the outage: attempts sent while it was down)")

	for _, ch := range []struct {
		title   string
		results []ingest.Result
		st      ingest.Storage
	}{
		{fmt.Sprintf("C halves, from %d to %d, at %s", st.Slots, st.Slots/2, dur(ingest.ChangeAt)), runs.halves, ingest.Changed(st.Slots / 2)},
		{fmt.Sprintf("C doubles, from %d to %d, at %s", st.Slots, 2*st.Slots, dur(ingest.ChangeAt)), runs.doubles, ingest.Changed(2 * st.Slots)},
	} {
		fmt.Fprintf(stdout, "\n%s (the fixed limit stays at %d)\n", ch.title, ingest.FixedSizes[runs.best])
		writeChangeTable(stdout, ch.results, ingest.FixedSizes[runs.best], ch.st)
	}
	fmt.Fprintf(stdout, "(after the change: from %s on; recovered: the first whole second after it in which the storage held at most\n", dur(ingest.ChangeAt))
	fmt.Fprintf(stdout, " 1.3 times the new C and stored at least 90%% of its new capacity, counted from the change)\n")

	l := ingestLessons(runs)
	fmt.Fprintf(stdout, "\nWhat the ingestion study shows:\n")
	for _, p := range l.paragraphs {
		writeWrapped(stdout, "  "+p.lead+": ", p.text, 114)
	}

	charts := []struct {
		file  string
		chart svg.Chart
	}{
		{"ingest-in-flight.svg", heldChart(runs.variants, runs.configs, st, "The backlog after the outage: writes the storage holds", l.held)},
		{"ingest-stored.svg", storedChart(runs.variants, st, l.stored)},
		{"ingest-sweep.svg", sweepChart(runs, l.sweep)},
		{"ingest-c-halves.svg", heldChart(runs.halves, runs.configs, ingest.Changed(st.Slots/2), fmt.Sprintf("C halves at %s: writes the storage holds", dur(ingest.ChangeAt)), l.halves)},
		{"ingest-c-doubles.svg", heldChart(runs.doubles, runs.configs, ingest.Changed(2*st.Slots), fmt.Sprintf("C doubles at %s: writes the storage holds", dur(ingest.ChangeAt)), l.doubles)},
	}
	var files []string
	for _, ch := range charts {
		ch.chart.Note = ingestNote
		name := filepath.Join(c.out, ch.file)
		if err := ch.chart.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// ingestPolicy is the writers' policy before any bound, as ingest.Policy
// builds it.
const ingestPolicy = "MaxAttempts -1 (every write retried until it is stored), Exponential{Base: 100ms, Cap: 2s} (full jitter), AttemptTimeout 500ms"

// ingestNote is the model, at the foot of each ingestion chart.
var ingestNote = fmt.Sprintf("The model: %s writes arrive over a %s outage of the storage, which refuses them at once; %s writers "+
	"store them, each retrying under %s. The storage serves C = %d writes at once in %s to %s each (%s a second) and queues the "+
	"rest, unbounded; it does a write whose writer timed out all the same.",
	count(ingest.Writes), dur(ingest.Outage), count(ingest.Writers), ingestPolicy, ingest.StorageSlots, dur(ingest.WorkMin), dur(ingest.WorkMax),
	count(int(ingest.StudyStorage().Capacity(ingest.StorageSlots))))

// rowName is a variant's name in the tables, the fixed limit's with its
// size.
func rowName(r ingest.Result, fixed int) string {
	if r.Name == ingest.Names.Fixed {
		return fmt.Sprintf("%s (%d)", r.Name, fixed)
	}
	return r.Name
}

// drains says how a run drained: "drains in 25.1 s", "does not drain in
// 230.0 s".
func drains(r ingest.Result) string {
	if !r.Drained {
		return "does not drain in " + secs(r.Drain())
	}
	return "drains in " + secs(r.Drain())
}

// drainOf formats a run's drain, or says it did not drain.
func drainOf(r ingest.Result) string {
	if !r.Drained {
		return fmt.Sprintf("not in %s", secs(r.Drain()))
	}
	return secs(r.Drain())
}

// writeIngestTable prints the first scenario, one row per variant.
func writeIngestTable(w io.Writer, results []ingest.Result, best ingest.Result, fixed int, st ingest.Storage) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tdrain\tvs best fixed\tpeak in flight\tafter 10 s\tp99 latency\ttimed out\tattempts\tin the outage\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%.2fx\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rowName(r, fixed), drainOf(r), r.Drain().Seconds()/best.Drain().Seconds(),
			count(r.Peak), count(ingest.PeakFrom(r, st.Outage+settle)), ms(r.Quantile(0.99)), count(r.TimedOut), count(r.Attempts), count(r.InOutage))
	}
	tw.Flush()
}

// settle is the time the study gives a limit that learns after the
// storage's return before it holds it to 1.3 C.
const settle = 10 * time.Second

// writeChangeTable prints a run of the second scenario, one row per
// variant.
func writeChangeTable(w io.Writer, results []ingest.Result, fixed int, st ingest.Storage) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tdrain\tpeak in flight after the change\tp99 latency\ttimed out\tstored a second after the change\trecovered\t")
	for _, r := range results {
		rec := "no"
		if d, ok := ingest.Recovery(r, st); ok {
			rec = "after " + secs(d)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rowName(r, fixed), drainOf(r), count(ingest.PeakFrom(r, st.ChangeAt)), ms(r.Quantile(0.99)),
			count(r.TimedOut), count(int(math.Round(storedRate(r, st.ChangeAt)))), rec)
	}
	tw.Flush()
}

// storedRate returns the writes stored a second from t to the drain.
func storedRate(r ingest.Result, t time.Duration) float64 {
	n := 0
	for k := int(t / ingest.TraceBin); k < len(r.StoredIn); k++ {
		n += r.StoredIn[k]
	}
	if r.Done <= t {
		return 0
	}
	return float64(n) / (r.Done - t).Seconds()
}

// ingestParagraph is one paragraph of what the study shows.
type ingestParagraph struct{ lead, text string }

// ingestLessonSet is what the ingestion study shows, in plain words built
// from the runs' numbers, and the charts' subtitles.
type ingestLessonSet struct {
	paragraphs                           []ingestParagraph
	held, stored, sweep, halves, doubles string
}

// byName returns the result named name, or nil.
func byName(results []ingest.Result, name string) *ingest.Result {
	for i := range results {
		if results[i].Name == name {
			return &results[i]
		}
	}
	return nil
}

// times formats a ratio: "6.6 times".
func times(a, b time.Duration) string { return fmt.Sprintf("%.1f times", a.Seconds()/b.Seconds()) }

// ingestLessons says what the runs show. A claim that depends on which way
// the numbers went is made only when they went that way.
func ingestLessons(runs ingestRuns) ingestLessonSet {
	var l ingestLessonSet
	st := ingest.StudyStorage()
	c := st.Slots
	best := runs.sweep[runs.best]
	bestN := ingest.FixedSizes[runs.best]
	none, rl := byName(runs.variants, ingest.Names.None), byName(runs.variants, ingest.Names.Rate)
	add := func(lead, text string) { l.paragraphs = append(l.paragraphs, ingestParagraph{lead, text}) }

	// No bound.
	text := fmt.Sprintf("The %s writers hold up to %s writes at the storage, %.0f times C, so a write waits longer than its %s timeout: "+
		"%s attempts time out, and the storage spends its capacity on writes whose writers have gone. It %s, %s the best "+
		"fixed limit's %s.", count(ingest.Writers), count(none.Peak), float64(none.Peak)/float64(c), dur(ingest.AttemptTimeout),
		count(none.TimedOut), drains(*none), times(none.Drain(), best.Drain()), secs(best.Drain()))
	if !none.Drained {
		text = fmt.Sprintf("The %s writers hold up to %s writes at the storage and do not drain it in %s.", count(ingest.Writers), count(none.Peak), secs(none.Drain()))
	}
	add("no bound", text)
	l.held = fmt.Sprintf("No bound holds %s writes at the storage and drains in %s; the fixed limit of %d, %s.", count(none.Peak), drainOf(*none), bestN, secs(best.Drain()))

	// The sweep.
	lo, hi := -1, -1
	for i, r := range runs.sweep {
		if r.Drained && float64(r.Done) <= 1.01*float64(best.Done) {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	text = fmt.Sprintf("Every fixed limit from %s to %s slots drains in %s: from C up to where the queue reaches the timeout, the storage is "+
		"served flat out and a larger limit only adds queueing (p99 %s at %s, %s at %s).",
		count(ingest.FixedSizes[lo]), count(ingest.FixedSizes[hi]), secs(best.Drain()), ms(runs.sweep[lo].Quantile(0.99)), count(ingest.FixedSizes[lo]),
		ms(runs.sweep[hi].Quantile(0.99)), count(ingest.FixedSizes[hi]))
	if lo > 0 {
		text += fmt.Sprintf(" Below C it drains slower in proportion (%s at %s).", secs(runs.sweep[lo-1].Drain()), count(ingest.FixedSizes[lo-1]))
	}
	if hi+1 < len(runs.sweep) {
		r := runs.sweep[hi+1]
		text += fmt.Sprintf(" Above, the timeouts come back: at %s slots %s time out, all wasted work, and it %s.", count(ingest.FixedSizes[hi+1]), plural(r.TimedOut, "attempt"), drains(r))
	}
	text += fmt.Sprintf(" The best, %d, is chosen knowing C.", bestN)
	add("fixed limits", text)
	l.sweep = fmt.Sprintf("Limits from %s to %s drain in %s; below, slower; above, timeouts.", count(ingest.FixedSizes[lo]), count(ingest.FixedSizes[hi]), secs(best.Drain()))

	// The rate limit, and the change of C.
	rh, rd := byName(runs.halves, ingest.Names.Rate), byName(runs.doubles, ingest.Names.Rate)
	fh, fd := byName(runs.halves, ingest.Names.Fixed), byName(runs.doubles, ingest.Names.Fixed)
	text = fmt.Sprintf("Told the storage's throughput in advance, it drains in %s with the storage holding at most %s, but it bounds the rate, "+
		"not what is in flight. When C halves, the same rate is twice what the storage serves: it holds up to %s writes, %s attempts "+
		"time out, and it %s. When C doubles, it stores %s writes a second where %s could be.",
		drainOf(*rl), count(rl.Peak), count(ingest.PeakFrom(*rh, ingest.ChangeAt)), count(rh.TimedOut), drains(*rh),
		count(int(math.Round(storedRate(*rd, ingest.ChangeAt)))), count(int(st.Capacity(2*c))))
	add("the rate limit", text)
	text = fmt.Sprintf("The fixed limit of %d, chosen for C = %d, holds %d when C halves (%.0f times the new C: its p99 goes from %s to %s, with "+
		"%s), and when C doubles it stores %s writes a second of the %s the storage could serve, draining in %s.",
		bestN, c, ingest.PeakFrom(*fh, ingest.ChangeAt), float64(ingest.PeakFrom(*fh, ingest.ChangeAt))/float64(c/2), ms(best.Quantile(0.99)), ms(fh.Quantile(0.99)),
		plural(fh.TimedOut, "timeout"), count(int(math.Round(storedRate(*fd, ingest.ChangeAt)))), count(int(st.Capacity(2*c))), drainOf(*fd))
	add("a fixed limit when C changes", text)
	l.halves = fmt.Sprintf("When C halves, the rate limit overloads the storage (%s writes held); the fixed limit holds %d.", count(ingest.PeakFrom(*rh, ingest.ChangeAt)), ingest.PeakFrom(*fh, ingest.ChangeAt))
	l.doubles = fmt.Sprintf("When C doubles, the fixed limit of %d and the rate limit leave half the capacity unused.", bestN)
	l.stored = fmt.Sprintf("Stored per second: at most %s with any bound that keeps the storage busy; no bound collapses to its timeouts.", count(int(st.Capacity(c))))

	if a := byName(runs.variants, ingest.Names.Adaptive); a != nil {
		ab := byName(runs.variants, ingest.Names.AdaptiveBreaker)
		ah, ad := byName(runs.halves, ingest.Names.Adaptive), byName(runs.doubles, ingest.Names.Adaptive)
		after := ingest.PeakFrom(*a, st.Outage+settle)
		ratio := a.Drain().Seconds() / best.Drain().Seconds()
		verdict := func(ok bool, yes, no string) string {
			if ok {
				return yes
			}
			return no
		}
		recov := func(r *ingest.Result, s ingest.Storage) string {
			if d, ok := ingest.Recovery(*r, s); ok {
				return "recovers " + secs(d) + " after the change"
			}
			return "does not recover before it drains"
		}
		text = fmt.Sprintf("Told nothing, it drains in %s, %.2f times the best fixed limit's (%s: the target is 1.15), holds at most %s "+
			"writes from 10 s after the storage's return, %.2f C (%s: the target is 1.3 C), and %s at its peak. When C halves it %s, when it doubles it %s.",
			drainOf(*a), ratio, verdict(ratio <= 1.15, "met", "missed"), count(after), float64(after)/float64(c), verdict(float64(after) <= 1.3*float64(c), "met", "missed"),
			count(a.Peak), recov(ah, ingest.Changed(c/2)), recov(ad, ingest.Changed(2*c)))
		add("the adaptive limit", text)
		if ab != nil && a.InOutage > 0 {
			cut := 1 - float64(ab.InOutage)/float64(a.InOutage)
			text = fmt.Sprintf("The breaker opens after a few refusals and lets one probe through at a time: %s sent in the outage instead "+
				"of %s, %.1f%% fewer (%s: the target is 90%%), for a drain of %s.", plural(ab.InOutage, "attempt"), count(a.InOutage), 100*cut,
				verdict(cut >= 0.9, "met", "missed"), drainOf(*ab))
			add("with the breaker", text)
		}
	}
	add("in short", fmt.Sprintf("Bound what is in flight, not the rate: a concurrency limit near C drains the backlog %s sooner than no bound "+
		"and wastes no work, and only a limit that follows the storage stays right when C changes.", times(none.Drain(), best.Drain())))
	return l
}

// Colours of the ingestion variants, the same on every chart.
func ingestColor(name string) string {
	switch name {
	case ingest.Names.None:
		return "#000000"
	case ingest.Names.Rate:
		return "#E69F00"
	case ingest.Names.Fixed:
		return "#0072B2"
	case ingest.Names.Adaptive:
		return "#009E73"
	}
	return "#CC79A7"
}

// heldChart draws the writes the storage holds, the most in each trace
// bin, per variant, on a log axis, from 0 to the drain of the slowest
// bounded variant.
func heldChart(results []ingest.Result, configs []ingest.Config, st ingest.Storage, title, lesson string) svg.Chart {
	var series []svg.Series
	end := 0.0
	for _, r := range results {
		s := svg.Series{Name: r.Name, Color: ingestColor(r.Name), Dashed: r.Name == ingest.Names.AdaptiveBreaker}
		for k, n := range r.HeldPeak {
			v := float64(n)
			if n == 0 {
				v = math.NaN()
			}
			x0 := (time.Duration(k) * ingest.TraceBin).Seconds()
			s.X = append(s.X, x0, x0+ingest.TraceBin.Seconds())
			s.Y = append(s.Y, v, v)
		}
		series = append(series, s)
		if r.Name != ingest.Names.None && r.Drained {
			end = max(end, r.Done.Seconds())
		}
	}
	rules := []svg.Rule{{Y: float64(st.Slots), Label: fmt.Sprintf("C = %d", st.Slots), LabelBelow: true}}
	if st.ChangeAt > 0 {
		rules = append(rules, svg.Rule{Y: float64(st.ChangedSlots), Label: fmt.Sprintf("C = %d from %s", st.ChangedSlots, dur(st.ChangeAt)), Color: colorLimiter})
	}
	return svg.Chart{
		Title: title, Subtitle: lesson,
		XLabel: "seconds since the outage began", YLabel: "writes in service and queued (log)",
		Width: 960, Height: 560, Series: series, LogY: true,
		Bands: []svg.Band{{X0: 0, X1: st.Outage.Seconds(), Label: "storage down"}},
		Rules: rules, XMin: 0, XMax: math.Ceil(end/5)*5 + 5, Headroom: 0.06,
	}
}

// storedChart draws the writes stored per second, per variant.
func storedChart(results []ingest.Result, st ingest.Storage, lesson string) svg.Chart {
	var series []svg.Series
	end := 0.0
	per := int(time.Second / ingest.TraceBin)
	for _, r := range results {
		s := svg.Series{Name: r.Name, Color: ingestColor(r.Name), Dashed: r.Name == ingest.Names.AdaptiveBreaker}
		for k := 0; k < len(r.StoredIn); k += per {
			n := 0
			for _, v := range r.StoredIn[k:min(k+per, len(r.StoredIn))] {
				n += v
			}
			x0 := (time.Duration(k) * ingest.TraceBin).Seconds()
			s.X = append(s.X, x0, x0+1)
			s.Y = append(s.Y, float64(n), float64(n))
		}
		series = append(series, s)
		end = max(end, math.Ceil(r.Done.Seconds()))
	}
	return svg.Chart{
		Title: "The backlog after the outage: writes stored per second", Subtitle: lesson,
		XLabel: "seconds since the outage began (one-second bins)", YLabel: "writes stored per second",
		Width: 960, Height: 560, Series: series,
		Bands: []svg.Band{{X0: 0, X1: st.Outage.Seconds(), Label: "storage down"}},
		Rules: []svg.Rule{{Y: st.Capacity(st.Slots), Label: fmt.Sprintf("capacity at C: %s/s", count(int(st.Capacity(st.Slots)))), LabelBelow: true}},
		XMin:  0, XMax: end, Headroom: 0.06,
	}
}

// sweepChart draws the drain against the fixed limit, with the drains of
// the other variants as rules.
func sweepChart(runs ingestRuns, lesson string) svg.Chart {
	s := svg.Series{Name: "fixed limit: drain", Color: ingestColor(ingest.Names.Fixed), Markers: true}
	for i, r := range runs.sweep {
		s.X = append(s.X, float64(ingest.FixedSizes[i]))
		s.Y = append(s.Y, r.Drain().Seconds())
	}
	var rules []svg.Rule
	for _, r := range runs.variants {
		if r.Name != ingest.Names.Fixed {
			rules = append(rules, svg.Rule{Y: r.Drain().Seconds(), Label: fmt.Sprintf("%s: %s", r.Name, drainOf(r)), Color: ingestColor(r.Name)})
		}
	}
	return svg.Chart{
		Title: "The backlog after the outage: drain time against a fixed concurrency limit", Subtitle: lesson,
		XLabel: fmt.Sprintf("slots (C = %d)", ingest.StorageSlots), YLabel: "drain, seconds",
		Width: 960, Height: 560, Series: []svg.Series{s}, Rules: rules,
		XMin: 0, XMax: float64(ingest.FixedSizes[len(ingest.FixedSizes)-1]), Headroom: 0.06,
	}
}
