package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
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
	// The subtitles read the largest client count off the table.
	last := len(c.clients) - 1
	var callsAt, timeAt []string
	for si, st := range strategies {
		p := at(si, last)
		callsAt = append(callsAt, fmt.Sprintf("%s %s", st.Name, count(int(math.Round(p.Calls)))))
		timeAt = append(timeAt, fmt.Sprintf("%s %.1f s", st.Name, p.Time.Seconds()))
	}
	n := c.clients[last]
	charts := []struct {
		file  string
		chart svg.Chart
	}{
		{"contention-calls.svg", svg.Chart{
			Title:    "Write calls until all clients succeed" + sub,
			Subtitle: fmt.Sprintf("Each call is load on the server. At %d clients, write calls per episode: %s.", n, strings.Join(callsAt, ", ")),
			XLabel:   "clients", YLabel: "write calls (mean per episode)", Series: calls,
		}},
		{"contention-time.svg", svg.Chart{
			Title:    "Time until the last client succeeds" + sub,
			Subtitle: fmt.Sprintf("At %d clients, the last client succeeds after: %s.", n, strings.Join(timeAt, ", ")),
			XLabel:   "clients", YLabel: "seconds (mean per episode, log scale)", Series: times, LogY: true,
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
