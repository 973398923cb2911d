// Command benchtable turns the output of this module's benchmarks into the
// Markdown results table of README.md, so that no number there is typed by
// hand.
//
// It reads, on standard input, either the raw output of
//
//	go test -bench . -benchmem -count 10 | tee raw.txt
//
// or what benchstat prints for one such file, and writes one table per
// scenario: the median ns/op, B/op and allocs/op of each library, any custom
// metric the scenario reports, and the time as a multiple of the floor (the
// direct call) and of the fastest peer. A heading gives the machine (the cpu
// line and GOMAXPROCS) and the date, and a last section checks the targets of
// the speed issue against the numbers. Usage:
//
//	go run ./cmd/benchtable < raw.txt                   # Markdown on stdout
//	go run ./cmd/benchtable -readme README.md < raw.txt # replace the table in README.md
//
// With -readme, the text between the lines <!-- benchtable --> and
// <!-- /benchtable --> is replaced and the rest of the file is kept.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	date := flag.String("date", time.Now().UTC().Format(time.DateOnly), "date of the run, shown in the heading")
	readme := flag.String("readme", "", "replace the table between the benchtable markers of this file instead of printing it")
	floor := flag.String("floor", "direct", "the library that is the floor")
	ours := flag.String("ours", "retry", "our library; its variants are named ours-something")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, options{date: *date, readme: *readme, floor: *floor, ours: *ours}); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

type options struct {
	date, readme, floor, ours string
}

func run(in io.Reader, out io.Writer, o options) error {
	rep, err := parse(in)
	if err != nil {
		return err
	}
	md := rep.markdown(o)
	if o.readme == "" {
		_, err := io.WriteString(out, md)
		return err
	}
	doc, err := os.ReadFile(o.readme)
	if err != nil {
		return err
	}
	next, err := splice(string(doc), md)
	if err != nil {
		return fmt.Errorf("%s: %w", o.readme, err)
	}
	return os.WriteFile(o.readme, []byte(next), 0o644)
}

// Units, as go test prints them.
const (
	nsPerOp     = "ns/op"
	bytesPerOp  = "B/op"
	allocsPerOp = "allocs/op"
)

// A result holds every sample of one benchmark, by unit.
type result struct {
	scenario string // BenchmarkSuccess/lib=retry-2 -> Success
	lib      string // retry; "" for a benchmark without a lib= part
	procs    int    // the -N suffix; 1 when there is none
	samples  map[string][]float64
	units    []string // in the order first seen
}

func (r *result) add(unit string, v float64) {
	if _, ok := r.samples[unit]; !ok {
		r.units = append(r.units, unit)
	}
	r.samples[unit] = append(r.samples[unit], v)
}

// median returns the median of unit's samples, and false if there are none.
func (r *result) median(unit string) (float64, bool) {
	s := slices.Clone(r.samples[unit])
	if len(s) == 0 {
		return 0, false
	}
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// spread returns the largest distance from the median to a sample, as a
// fraction of the median.
func (r *result) spread(unit string) float64 {
	m, ok := r.median(unit)
	if !ok || m == 0 {
		return 0
	}
	d := 0.0
	for _, v := range r.samples[unit] {
		d = max(d, math.Abs(v-m))
	}
	return d / m
}

type report struct {
	cpu, goos, goarch string
	results           []*result // in the order first seen
	byKey             map[string]*result
	benchstat         bool
}

func (rep *report) result(name string) *result {
	scenario, lib, procs := splitName(name)
	key := scenario + "\x00" + lib + "\x00" + strconv.Itoa(procs)
	if r, ok := rep.byKey[key]; ok {
		return r
	}
	r := &result{scenario: scenario, lib: lib, procs: procs, samples: map[string][]float64{}}
	rep.byKey[key] = r
	rep.results = append(rep.results, r)
	return r
}

// splitName splits "Success/lib=retry-2" (the Benchmark prefix already gone)
// into its scenario, library and GOMAXPROCS.
func splitName(name string) (scenario, lib string, procs int) {
	procs = 1
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if n, err := strconv.Atoi(name[i+1:]); err == nil && n > 0 {
			name, procs = name[:i], n
		}
	}
	scenario, rest, _ := strings.Cut(name, "/")
	for part := range strings.SplitSeq(rest, "/") {
		if v, ok := strings.CutPrefix(part, "lib="); ok {
			lib = v
		}
	}
	return scenario, lib, procs
}

// parse reads raw go test -bench output, or benchstat's table of one file.
func parse(in io.Reader) (*report, error) {
	rep := &report{byKey: map[string]*result{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var unit string // benchstat: the unit of the table being read
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, " ") {
			switch k {
			case "cpu":
				rep.cpu = strings.TrimSpace(v)
				continue
			case "goos":
				rep.goos = strings.TrimSpace(v)
				continue
			case "goarch":
				rep.goarch = strings.TrimSpace(v)
				continue
			}
		}
		switch {
		case strings.HasPrefix(line, "Benchmark"):
			if err := rep.rawLine(line); err != nil {
				return nil, err
			}
		case strings.Contains(line, "│"):
			// benchstat: a header, or the unit line that opens a table.
			rep.benchstat = true
			// The unit line comes last, so the unit is the first cell of
			// the last such line.
			if cells := strings.FieldsFunc(line, func(r rune) bool { return r == '│' || r == ' ' }); len(cells) > 0 {
				unit = cells[0]
			}
		case line == "" || strings.HasPrefix(line, "geomean"):
			unit = ""
		case unit != "":
			if err := rep.benchstatLine(line, unit); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rep.results) == 0 {
		return nil, errors.New("no benchmark results in the input")
	}
	return rep, nil
}

// rawLine reads "BenchmarkX/lib=y-2  1000  12.5 ns/op  0 B/op  0 allocs/op".
func (rep *report) rawLine(line string) error {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return nil // "BenchmarkX" alone, as -v prints before the result
	}
	if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
		return nil
	}
	r := rep.result(strings.TrimPrefix(f[0], "Benchmark"))
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return fmt.Errorf("%q: %v", line, err)
		}
		r.add(f[i+1], v)
	}
	return nil
}

// benchstatLine reads "Success/lib=retry-2   105.0n ± 2%" in a table whose
// unit is unit. Only the first column (the first file) is read.
func (rep *report) benchstatLine(line, unit string) error {
	f := strings.Fields(line)
	if len(f) < 2 || strings.HasPrefix(f[0], "¹") || strings.HasPrefix(f[0], "²") {
		return nil
	}
	v, err := siValue(f[1])
	if err != nil {
		return fmt.Errorf("%q: %v", line, err)
	}
	if unit == "sec/op" {
		unit, v = nsPerOp, v*1e9
	}
	rep.result(f[0]).add(unit, v)
	return nil
}

// siValue reads a number as benchstat prints it: 12.5n, 1.2Ki, 3.000, 0.
func siValue(s string) (float64, error) {
	scale := map[string]float64{
		"n": 1e-9, "µ": 1e-6, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
	}
	for _, suffix := range []string{"Ki", "Mi", "Gi", "n", "µ", "u", "m", "k", "M", "G"} {
		if num, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			return v * scale[suffix], err
		}
	}
	return strconv.ParseFloat(s, 64)
}

// runs returns the number of samples behind each median, as a phrase.
func (rep *report) runs() string {
	if rep.benchstat {
		return "a median as benchstat printed it"
	}
	lo, hi := math.MaxInt, 0
	for _, r := range rep.results {
		n := len(r.samples[nsPerOp])
		lo, hi = min(lo, n), max(hi, n)
	}
	switch {
	case lo == 1 && hi == 1:
		return "from 1 run"
	case lo == hi:
		return fmt.Sprintf("the median of %d runs", lo)
	}
	return fmt.Sprintf("the median of %d to %d runs", lo, hi)
}

// procs returns the GOMAXPROCS values seen, in increasing order.
func (rep *report) procs() []int {
	var ps []int
	for _, r := range rep.results {
		if !slices.Contains(ps, r.procs) {
			ps = append(ps, r.procs)
		}
	}
	slices.Sort(ps)
	return ps
}

// A group is one table: one scenario at one GOMAXPROCS.
type group struct {
	title   string
	results []*result
}

func (rep *report) groups() (scenarios []group, others []*result) {
	multi := len(rep.procs()) > 1
	index := map[string]int{}
	for _, r := range rep.results {
		if r.lib == "" {
			others = append(others, r)
			continue
		}
		title := r.scenario
		if multi {
			title += fmt.Sprintf(" (GOMAXPROCS %d)", r.procs)
		}
		i, ok := index[title]
		if !ok {
			i = len(scenarios)
			index[title] = i
			scenarios = append(scenarios, group{title: title})
		}
		scenarios[i].results = append(scenarios[i].results, r)
	}
	return scenarios, others
}

func (o options) isOurs(lib string) bool {
	return lib == o.ours || strings.HasPrefix(lib, o.ours+"-")
}

func (o options) isPeer(lib string) bool { return lib != o.floor && !o.isOurs(lib) }

// find returns the result of lib in g, or nil.
func (g group) find(lib string) *result {
	for _, r := range g.results {
		if r.lib == lib {
			return r
		}
	}
	return nil
}

// fastestPeer returns the peer with the lowest median ns/op in g, or nil.
func (g group) fastestPeer(o options) *result {
	var best *result
	bestNs := math.Inf(1)
	for _, r := range g.results {
		if ns, ok := r.median(nsPerOp); ok && o.isPeer(r.lib) && ns < bestNs {
			best, bestNs = r, ns
		}
	}
	return best
}

func (rep *report) markdown(o options) string {
	var b strings.Builder
	machine := rep.cpu
	if machine == "" {
		machine = "unknown cpu"
	}
	if rep.goos != "" {
		machine += ", " + rep.goos + "/" + rep.goarch
	}
	procs := rep.procs()
	ps := make([]string, len(procs))
	for i, p := range procs {
		ps[i] = strconv.Itoa(p)
	}
	fmt.Fprintf(&b, "Measured on %s: %s, GOMAXPROCS %s. Each number is %s; ", o.date, machine, strings.Join(ps, " and "), rep.runs())
	if !rep.benchstat {
		b.WriteString("± is the largest distance from the median to a run. ")
	}
	fmt.Fprintf(&b, "× floor divides the time by `%s`'s, × fastest peer by the fastest peer's in the same table.\n", o.floor)

	scenarios, others := rep.groups()
	if len(others) > 0 {
		b.WriteString("\n| benchmark | time/op | B/op | allocs/op |\n|---|--:|--:|--:|\n")
		for _, r := range others {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.scenario, duration(r), num(r, bytesPerOp), num(r, allocsPerOp))
		}
	}
	for _, g := range scenarios {
		rep.writeGroup(&b, g, o)
	}
	rep.writeTargets(&b, scenarios, o)
	return b.String()
}

func (rep *report) writeGroup(b *strings.Builder, g group, o options) {
	var extra []string // custom metrics, in the order first seen
	for _, r := range g.results {
		for _, u := range r.units {
			if u != nsPerOp && u != bytesPerOp && u != allocsPerOp && !slices.Contains(extra, u) {
				extra = append(extra, u)
			}
		}
	}
	fmt.Fprintf(b, "\n### %s\n\n| lib | time/op |", g.title)
	align := "|---|--:|"
	if !rep.benchstat {
		b.WriteString(" ± |")
		align += "--:|"
	}
	b.WriteString(" B/op | allocs/op | × floor | × fastest peer |")
	align += "--:|--:|--:|--:|"
	for _, u := range extra {
		fmt.Fprintf(b, " %s |", u)
		align += "--:|"
	}
	b.WriteString("\n" + align + "\n")
	floor, fastest := g.find(o.floor), g.fastestPeer(o)
	for _, r := range g.results {
		name := r.lib
		if o.isOurs(r.lib) {
			name = "**" + name + "**"
		}
		fmt.Fprintf(b, "| %s | %s |", name, duration(r))
		if !rep.benchstat {
			fmt.Fprintf(b, " %.0f%% |", 100*r.spread(nsPerOp))
		}
		fmt.Fprintf(b, " %s | %s | %s | %s |", num(r, bytesPerOp), num(r, allocsPerOp), ratio(r, floor), ratio(r, fastest))
		for _, u := range extra {
			fmt.Fprintf(b, " %s |", num(r, u))
		}
		b.WriteString("\n")
	}
}

// A target of the speed issue, checked against one table.
type target struct {
	scenario, text string
	check          func(g group, o options) (measured string, met bool, ok bool)
}

var targets = []target{
	{"Success", "first-try success: 0 allocs/op and at most 2× the floor", func(g group, o options) (string, bool, bool) {
		r, floor := g.find(o.ours), g.find(o.floor)
		allocs, ok1 := med(r, allocsPerOp)
		x, ok2 := ratioOf(r, floor)
		return fmt.Sprintf("%s allocs/op, %.2f× the floor", fmtNum(allocs), x), allocs == 0 && x <= 2, ok1 && ok2
	}},
	{"TwoFailures", "two failures then success: at most 0.6× the fastest peer and 3 allocs/op", func(g group, o options) (string, bool, bool) {
		r := g.find(o.ours)
		allocs, ok1 := med(r, allocsPerOp)
		x, ok2 := ratioOf(r, g.fastestPeer(o))
		return fmt.Sprintf("%s allocs/op, %.2f× the fastest peer", fmtNum(allocs), x), allocs <= 3 && x <= 0.6, ok1 && ok2
	}},
	{"Delay", "next delay: 0 allocs/op, under 10 ns", func(g group, o options) (string, bool, bool) {
		r := g.find(o.ours)
		allocs, ok1 := med(r, allocsPerOp)
		ns, ok2 := med(r, nsPerOp)
		return fmt.Sprintf("%s allocs/op, %s ns/op", fmtNum(allocs), fmtNum(ns)), allocs == 0 && ns < 10, ok1 && ok2
	}},
	{"Deadline", "deadline: gives up at ~40 ms with the operation's error kept", func(g group, o options) (string, bool, bool) {
		r := g.find(o.ours)
		ms, ok1 := med(r, "ms-to-return")
		kept, ok2 := med(r, "kept-error")
		return fmt.Sprintf("returns after %s ms, kept-error %s", fmtNum(ms), fmtNum(kept)), ms < 45 && kept == 1, ok1 && ok2
	}},
}

func (rep *report) writeTargets(b *strings.Builder, scenarios []group, o options) {
	var lines []string
	for _, t := range targets {
		for _, g := range scenarios {
			if g.title != t.scenario && !strings.HasPrefix(g.title, t.scenario+" (") {
				continue
			}
			measured, met, ok := t.check(g, o)
			if !ok {
				continue
			}
			verdict := "met"
			if !met {
				verdict = "**missed**"
			}
			where := ""
			if g.title != t.scenario {
				where = strings.TrimPrefix(g.title, t.scenario)
			}
			lines = append(lines, fmt.Sprintf("| %s%s | %s | %s |", t.text, where, measured, verdict))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Targets\n\n| target | measured (`%s`) | |\n|---|---|---|\n%s\n", o.ours, strings.Join(lines, "\n"))
}

func med(r *result, unit string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	return r.median(unit)
}

func ratioOf(r, base *result) (float64, bool) {
	x, ok1 := med(r, nsPerOp)
	y, ok2 := med(base, nsPerOp)
	if !ok1 || !ok2 || y == 0 {
		return 0, false
	}
	return x / y, true
}

func ratio(r, base *result) string {
	x, ok := ratioOf(r, base)
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f×", x)
}

func num(r *result, unit string) string {
	v, ok := r.median(unit)
	if !ok {
		return "—"
	}
	return fmtNum(v)
}

// duration prints the median ns/op in a unit that suits it: 12.5 ns,
// 1.25 µs, 40.2 ms.
func duration(r *result) string {
	ns, ok := r.median(nsPerOp)
	switch {
	case !ok:
		return "—"
	case ns < 1e3:
		return fmtNum(ns) + " ns"
	case ns < 1e6:
		return fmtNum(ns/1e3) + " µs"
	case ns < 1e9:
		return fmtNum(ns/1e6) + " ms"
	}
	return fmtNum(ns/1e9) + " s"
}

// fmtNum prints about three significant digits, without exponents.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) || a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// Markers around the generated part of a README.
const (
	beginMarker = "<!-- benchtable -->"
	endMarker   = "<!-- /benchtable -->"
)

// splice replaces what lies between the markers in doc with md.
func splice(doc, md string) (string, error) {
	i := strings.Index(doc, beginMarker)
	j := strings.Index(doc, endMarker)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %s ... %s lines to replace", beginMarker, endMarker)
	}
	return doc[:i+len(beginMarker)] + "\n" + md + doc[j:], nil
}
