package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/svg"
)

// contentionStudy runs the sweep, prints its tables and writes its two charts.
func contentionStudy(c config, stdout io.Writer, prog *progress) ([]string, error) {
	strategies := sim.Strategies()
	var mu sync.Mutex
	start := time.Now()
	points := sim.Sweep(strategies, c.clients, c.episodes, c.seed, c.workers, func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		prog.update("contention", done, total)
	})
	elapsed := time.Since(start)
	at := func(s, i int) sim.Point { return points[s*len(c.clients)+i] }

	fmt.Fprintf(stdout, "CONTENTION STUDY: N clients update one row under optimistic concurrency control, N = %d to %d\n",
		c.clients[0], c.clients[len(c.clients)-1])
	fmt.Fprintf(stdout, "(the model of aws-samples/aws-arch-backoff-simulator; each message |N(10ms, 2ms)|; base %v, cap %v;\n", sim.StudyBase, sim.StudyCap)
	fmt.Fprintf(stdout, " means over %d episodes per point, seed %d, %v of computation)\n", c.episodes, c.seed, elapsed.Round(time.Millisecond))
	fmt.Fprintf(stdout, "Library backoffs: exponential = Exponential{Base: 10ms, Cap: 2s, Jitter: NoJitter} (the original's first retry waits 2*base);\n")
	fmt.Fprintf(stdout, "full/equal jitter = the same with FullJitter/EqualJitter; decorrelated = Decorrelated{Base: 5ms, Cap: 2s}; no backoff = Constant(0).\n")

	table := func(title string, cell func(p sim.Point) string) {
		fmt.Fprintf(stdout, "\n%s\n", title)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "clients\t")
		for _, s := range strategies {
			fmt.Fprintf(tw, "%s\t", s.Name)
		}
		fmt.Fprintln(tw)
		for i, n := range c.clients {
			fmt.Fprintf(tw, "%d\t", n)
			for s := range strategies {
				fmt.Fprintf(tw, "%s\t", cell(at(s, i)))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	table("Write calls until every client has succeeded (mean per episode)", func(p sim.Point) string {
		return fmt.Sprintf("%.1f", p.Calls)
	})
	table("Time until the last client succeeds, seconds (mean per episode)", func(p sim.Point) string {
		return fmt.Sprintf("%.3f", p.Time.Seconds())
	})
	writeReferenceTable(stdout, c, strategies, at)
	last := len(c.clients) - 1
	atLast := make([]sim.Point, len(strategies))
	for si := range strategies {
		atLast[si] = at(si, last)
	}
	lessons := contentionLessons(c.clients[last], atLast)
	fmt.Fprintf(stdout, "\nWhat the contention study shows:\n")
	writeWrapped(stdout, "  load: ", lessons.calls, 114)
	writeWrapped(stdout, "  time: ", lessons.time, 114)
	writeWrapped(stdout, "  in short: ", lessons.conclusion, 114)

	// Charts.
	var calls, times []svg.Series
	var refCalls, refTimes svg.Series
	refCalls.Name, refTimes.Name = "published (600 ep.)", "published (600 ep.)"
	refCalls.NoLine, refTimes.NoLine = true, true
	refCalls.Color, refTimes.Color = "#000000", "#000000"
	for s, st := range strategies {
		// Equal jitter lies on full jitter in the calls chart: dashed, it
		// lets the other show through.
		dashed := st.Name == "equal jitter"
		cs := svg.Series{Name: st.Name, Markers: true, Dashed: dashed}
		ts := svg.Series{Name: st.Name, Markers: true, Dashed: dashed}
		for i, n := range c.clients {
			p := at(s, i)
			cs.X, cs.Y = append(cs.X, float64(n)), append(cs.Y, p.Calls)
			ts.X, ts.Y = append(ts.X, float64(n)), append(ts.Y, p.Time.Seconds())
			if ref, ok := sim.LookupReference(st.Name, n); ok {
				refCalls.X, refCalls.Y = append(refCalls.X, float64(n)), append(refCalls.Y, ref.Calls)
				if ref.Time > 0 {
					refTimes.X, refTimes.Y = append(refTimes.X, float64(n)), append(refTimes.Y, ref.Time.Seconds())
				}
			}
		}
		calls = append(calls, cs)
		times = append(times, ts)
	}
	if len(refCalls.X) > 0 {
		calls = append(calls, refCalls)
	}
	if len(refTimes.X) > 0 {
		times = append(times, refTimes)
	}
	sub := fmt.Sprintf(" (%d episodes per point)", c.episodes)
	charts := []struct {
		file  string
		chart svg.Chart
	}{
		{"contention-calls.svg", svg.Chart{
			Title:    "Write calls until all clients succeed" + sub,
			Subtitle: lessons.calls,
			Note:     contentionNote,
			XLabel:   "clients", YLabel: "write calls (mean per episode)", Series: calls,
			Width: 900, Height: 520,
		}},
		{"contention-time.svg", svg.Chart{
			Title:    "Time until the last client succeeds" + sub,
			Subtitle: lessons.timeChart,
			Note:     contentionNote,
			XLabel:   "clients", YLabel: "seconds (mean per episode, log scale)", Series: times, LogY: true,
			Width: 900, Height: 520,
		}},
	}
	var files []string
	for _, ch := range charts {
		name := filepath.Join(c.out, ch.file)
		if err := ch.chart.WriteFile(name); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// contentionNote is the model, at the foot of both charts, so that they
// stand alone: above all, that its server has no capacity limit.
const contentionNote = "The model (Brooker's, AWS 2015): N clients each read one row and write it back if it has not " +
	"changed since (optimistic concurrency); a client whose write conflicts backs off and starts again. Each message " +
	"takes 10 ms on average (normal, SD 2 ms). The server answers at once and has no capacity limit: however many calls arrive together, " +
	"none waits or is refused. Backoff base 5 ms, cap 2 s."

// contention is what the contention study shows, in plain words built from
// the run's numbers at its largest client count.
type contention struct {
	calls, time, conclusion string
	// timeChart is the time chart's subtitle: the first part of time, what
	// a reader of that chart must not miss.
	timeChart string
}

// contentionLessons says what the sweep shows at n clients, from pts, the
// point of each of sim.Strategies at n. A claim that depends on which way
// the numbers went is made only when they went that way.
func contentionLessons(n int, pts []sim.Point) contention {
	by := map[string]sim.Point{}
	for _, p := range pts {
		by[p.Strategy] = p
	}
	exp, full, equal, decor, none := by["exponential"], by["full jitter"], by["equal jitter"], by["decorrelated"], by["no backoff"]
	calls := func(p sim.Point) string { return count(int(math.Round(p.Calls))) }
	secs := func(p sim.Point) string { return fmt.Sprintf("%.1f s", p.Time.Seconds()) }
	ratio := func(a, b float64) string { return fmt.Sprintf("%.1f", a/b) }

	var out contention
	jittered := []sim.Point{full, equal, decor}
	mostJittered := slices.MaxFunc(jittered, func(a, b sim.Point) int { return cmp.Compare(a.Calls, b.Calls) })
	lead := fmt.Sprintf("At %d clients, write calls per episode:", n)
	if mostJittered.Calls < min(exp.Calls, none.Calls) {
		lead = fmt.Sprintf("Each write call is load on the server, and jitter cuts it: at %d clients,", n)
	}
	out.calls = fmt.Sprintf("%s full jitter %s, equal jitter %s, decorrelated %s; exponential without jitter %s and no backoff %s. "+
		"Without jitter, clients that collided wait the same time and collide again.",
		lead, calls(full), calls(equal), calls(decor), calls(exp), calls(none))

	backingOff := []sim.Point{exp, full, equal, decor}
	fastest := slices.MinFunc(backingOff, func(a, b sim.Point) int { return cmp.Compare(a.Time, b.Time) })
	if none.Time < fastest.Time {
		out.time = fmt.Sprintf("No backoff finishes first (%s at %d clients, against %s for %s, the fastest that backs off) only because "+
			"this model's server has no capacity limit: the %s calls it sends, %s times %s's, cost it nothing. "+
			"A real server slows down or refuses calls under such a burst. ",
			secs(none), n, secs(fastest), fastest.Strategy, calls(none), ratio(none.Calls, full.Calls), full.Strategy)
	} else {
		out.time = fmt.Sprintf("%s finishes first: %s at %d clients. ", fastest.Strategy, secs(fastest), n)
	}
	out.timeChart = strings.TrimSpace(out.time)
	out.time += fmt.Sprintf("Exponential backoff without jitter takes %s, %s times as long as full jitter's %s: its clients keep colliding, "+
		"and each collision doubles their wait.", secs(exp), ratio(exp.Time.Seconds(), full.Time.Seconds()), secs(full))

	fewest := slices.MinFunc(pts, func(a, b sim.Point) int { return cmp.Compare(a.Calls, b.Calls) })
	switch {
	case fastest.Strategy == full.Strategy && full.Calls <= 1.05*fewest.Calls:
		out.conclusion = fmt.Sprintf("Back off, and jitter the backoff. Full jitter sends about the fewest calls (%s; the fewest, %s's, is %s) "+
			"and finishes first of the strategies that back off, so it is the library's default (Exponential{}). "+
			"Do not read the time chart as a case for retrying at once: that only pays against a server with no limit.",
			calls(full), fewest.Strategy, calls(fewest))
	default:
		out.conclusion = fmt.Sprintf("Back off, and jitter the backoff: %s sends the fewest calls (%s) and %s finishes first of the "+
			"strategies that back off (%s). Retrying at once only pays against a server with no limit.",
			fewest.Strategy, calls(fewest), fastest.Strategy, secs(fastest))
	}
	return out
}

// writeReferenceTable compares the points that have a published figure.
func writeReferenceTable(w io.Writer, c config, strategies []sim.Strategy, at func(s, i int) sim.Point) {
	type row struct {
		p   sim.Point
		ref sim.Reference
	}
	var rows []row
	for s, st := range strategies {
		for i, n := range c.clients {
			if ref, ok := sim.LookupReference(st.Name, n); ok {
				rows = append(rows, row{at(s, i), ref})
			}
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "\n(No published figure at these client counts: the reference has N = 10 and N = 100.)\n")
		return
	}
	fmt.Fprintf(w, "\nAgainst the published figures (original program, 600 episodes); ± is one standard error of our mean\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tclients\tcalls\tpublished\tdeviation\ttime, s\tpublished\tdeviation\t")
	for _, r := range rows {
		timeRef, timeDev := "-", "-"
		if r.ref.Time > 0 {
			timeRef = fmt.Sprintf("%.2f", r.ref.Time.Seconds())
			timeDev = fmt.Sprintf("%+.1f%%", 100*(r.p.Time.Seconds()/r.ref.Time.Seconds()-1))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f ± %.1f\t%.1f\t%+.1f%%\t%.3f ± %.3f\t%s\t%s\t\n",
			r.p.Strategy, r.p.Clients, r.p.Calls, r.p.CallsSE, r.ref.Calls, 100*(r.p.Calls/r.ref.Calls-1),
			r.p.Time.Seconds(), r.p.TimeSE.Seconds(), timeRef, timeDev)
	}
	tw.Flush()
}
