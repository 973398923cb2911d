package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseFile(t *testing.T, name string) *report {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	defer f.Close()
	rep, err := parse(f)
	require.NoError(t, err)
	return rep
}

func lookup(t *testing.T, rep *report, scenario, lib string, procs int) *result {
	t.Helper()
	for _, r := range rep.results {
		if r.scenario == scenario && r.lib == lib && r.procs == procs {
			return r
		}
	}
	require.Failf(t, "no result", "%s lib=%s -%d", scenario, lib, procs)
	return nil
}

// testdata/raw.txt is real output of
// go test -bench 'TimeNow|Success$|Delay|Deadline' -benchmem -count 2 -benchtime 2x,
// trimmed to three libraries, and testdata/benchstat.txt is what benchstat
// printed for it. Both must give the same medians.
func TestParseRawAndBenchstat(t *testing.T) {
	tests := []struct {
		name, scenario, lib, unit string
		want                      float64
	}{
		{name: "time of ours", scenario: "Success", lib: "retry", unit: nsPerOp, want: 7978},
		{name: "time of a peer", scenario: "Success", lib: "cenkalti", unit: nsPerOp, want: 4852.5},
		{name: "bytes", scenario: "Success", lib: "failsafe", unit: bytesPerOp, want: 560},
		{name: "allocs", scenario: "Success", lib: "cenkalti", unit: allocsPerOp, want: 4},
		{name: "bytes above 1Ki", scenario: "Deadline", lib: "retry", unit: bytesPerOp, want: 1152},
		{name: "custom metric", scenario: "Deadline", lib: "retry", unit: "attempts/op", want: 1.5},
		{name: "custom metric without /", scenario: "Deadline", lib: "cenkalti", unit: "kept-error", want: 0},
		{name: "milliseconds", scenario: "Deadline", lib: "failsafe", unit: nsPerOp, want: 50461897},
		{name: "no lib", scenario: "TimeNow", lib: "", unit: nsPerOp, want: 158.25},
	}
	for _, file := range []string{"raw.txt", "benchstat.txt"} {
		rep := parseFile(t, file)
		assert.Equal(t, "Intel(R) Xeon(R) Processor", rep.cpu, file)
		assert.Equal(t, []int{2}, rep.procs(), file)
		assert.Len(t, rep.results, 11, file)
		for _, tt := range tests {
			t.Run(file+"/"+tt.name, func(t *testing.T) {
				got, ok := lookup(t, rep, tt.scenario, tt.lib, 2).median(tt.unit)
				require.True(t, ok, "no %s", tt.unit)
				// benchstat prints 4 significant digits.
				assert.InEpsilonf(t, tt.want+1e-9, got+1e-9, 1e-3, "median %s = %v, want %v", tt.unit, got, tt.want)
			})
		}
	}
}

func TestSplitName(t *testing.T) {
	tests := []struct {
		name, in, scenario, lib string
		procs                   int
	}{
		{name: "lib and procs", in: "Success/lib=retry-2", scenario: "Success", lib: "retry", procs: 2},
		{name: "dash in lib", in: "TwoFailures/lib=retry-go-8", scenario: "TwoFailures", lib: "retry-go", procs: 8},
		{name: "no procs suffix", in: "Success/lib=go-retry", scenario: "Success", lib: "go-retry", procs: 1},
		{name: "no lib", in: "TimeNow-2", scenario: "TimeNow", lib: "", procs: 2},
		{name: "other sub-benchmark parts", in: "Budget/n=4/lib=retry-4", scenario: "Budget", lib: "retry", procs: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scenario, lib, procs := splitName(tt.in)
			assert.Equalf(t, tt.scenario, scenario, "splitName(%q) scenario = %q, want %q", tt.in, scenario, tt.scenario)
			assert.Equalf(t, tt.lib, lib, "splitName(%q) lib = %q, want %q", tt.in, lib, tt.lib)
			assert.Equalf(t, tt.procs, procs, "splitName(%q) procs = %d, want %d", tt.in, procs, tt.procs)
		})
	}
}

func TestSIValue(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{in: "158.3n", want: 158.3e-9},
		{in: "7.978µ", want: 7.978e-6},
		{in: "75.97m", want: 75.97e-3},
		{in: "1.125Ki", want: 1152},
		{in: "2.000Mi", want: 2 << 20},
		{in: "1.500k", want: 1500},
		{in: "0.000", want: 0},
		{in: "16.00", want: 16},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := siValue(tt.in)
			require.NoError(t, err)
			assert.InDeltaf(t, tt.want, got, 1e-9*max(1, tt.want), "siValue(%q) = %v, want %v", tt.in, got, tt.want)
		})
	}
	_, err := siValue("~")
	assert.Error(t, err, "siValue(\"~\")")
}

func TestMarkdown(t *testing.T) {
	md := parseFile(t, "raw.txt").markdown(options{date: "2026-11-30", floor: "direct", ours: "retry"})
	for _, want := range []string{
		"Measured on 2026-11-30: Intel(R) Xeon(R) Processor, linux/amd64, GOMAXPROCS 2. Each number is the median of 2 runs;",
		"| TimeNow | 158 ns | 0 | 0 |",
		"### Success\n",
		"| direct | 360 ns | 51% | 0 | 0 | 1.00× | 0.07× |",
		"| **retry** | 7.98 µs | 86% | 0 | 0 | 22.19× | 1.64× |",
		"| cenkalti | 4.85 µs | 3% | 168 | 4 | 13.50× | 1.00× |",
		"| lib | time/op | ± | B/op | allocs/op | × floor | × fastest peer | attempts/op | kept-error | ms-to-return |",
		"| **retry** | 76.0 ms | 11% | 1152 | 13 | — | 1.51× | 1.50 | 1 | 76.0 |",
		"| first-try success: 0 allocs/op and at most 2× the floor | 0 allocs/op, 22.19× the floor | **missed** |",
		"| next delay: 0 allocs/op, under 10 ns | 0 allocs/op, 318 ns/op | **missed** |",
		"| deadline: gives up at ~40 ms with the operation's error kept | returns after 76.0 ms, kept-error 1 | **missed** |",
	} {
		assert.Containsf(t, md, want, "markdown lacks %q:\n%s", want, md)
	}
	// No two-failures table in the input, so no two-failures target.
	assert.NotContains(t, md, "two failures")
}

func TestMarkdownSeveralProcs(t *testing.T) {
	in := `cpu: Test CPU
BenchmarkSuccess/lib=direct     	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkSuccess/lib=retry      	1000	 150.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkSuccess/lib=cenkalti   	1000	 900.0 ns/op	 168 B/op	 4 allocs/op
BenchmarkSuccess/lib=direct-2   	1000	 60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkSuccess/lib=retry-2    	1000	 300.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkSuccess/lib=cenkalti-2 	1000	 500.0 ns/op	 168 B/op	 4 allocs/op
`
	rep, err := parse(strings.NewReader(in))
	require.NoError(t, err)
	md := rep.markdown(options{date: "2026-11-30", floor: "direct", ours: "retry"})
	for _, want := range []string{
		"GOMAXPROCS 1 and 2. Each number is from 1 run;",
		"### Success (GOMAXPROCS 1)\n",
		"### Success (GOMAXPROCS 2)\n",
		"| **retry** | 150 ns | 0% | 0 | 0 | 1.50× | 0.17× |",
		"| **retry** | 300 ns | 0% | 0 | 0 | 5.00× | 0.60× |",
		"| first-try success: 0 allocs/op and at most 2× the floor (GOMAXPROCS 1) | 0 allocs/op, 1.50× the floor | met |",
		"| first-try success: 0 allocs/op and at most 2× the floor (GOMAXPROCS 2) | 0 allocs/op, 5.00× the floor | **missed** |",
	} {
		assert.Containsf(t, md, want, "markdown lacks %q:\n%s", want, md)
	}
}

func TestParseRejectsEmptyInput(t *testing.T) {
	_, err := parse(strings.NewReader("PASS\nok  \tgithub.com/x\t0.1s\n"))
	assert.Error(t, err)
}

func TestSplice(t *testing.T) {
	doc := "# Title\n\nintro\n\n<!-- benchtable -->\nold table\n<!-- /benchtable -->\n\nafter\n"
	got, err := splice(doc, "new table\n")
	require.NoError(t, err)
	want := "# Title\n\nintro\n\n<!-- benchtable -->\nnew table\n<!-- /benchtable -->\n\nafter\n"
	assert.Equalf(t, want, got, "splice = %q, want %q", got, want)

	_, err = splice("# no markers\n", "table")
	assert.Error(t, err, "splice without markers")
}

func TestRunWritesReadme(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "raw.txt"))
	require.NoError(t, err)
	readme := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(readme, []byte("# B\n<!-- benchtable -->\n<!-- /benchtable -->\ntail\n"), 0o644))

	var stdout bytes.Buffer
	require.NoError(t, run(bytes.NewReader(raw), &stdout, options{date: "2026-11-30", readme: readme, floor: "direct", ours: "retry"}))
	got, err := os.ReadFile(readme)
	require.NoError(t, err)
	assert.Empty(t, stdout.String(), "with -readme nothing goes to stdout")
	assert.True(t, strings.HasPrefix(string(got), "# B\n<!-- benchtable -->\nMeasured on 2026-11-30"), "README starts %q", string(got[:min(60, len(got))]))
	assert.True(t, strings.HasSuffix(string(got), "<!-- /benchtable -->\ntail\n"), "README ends %q", string(got[max(0, len(got)-40):]))
}

func TestOursPeersAndFloor(t *testing.T) {
	o := options{floor: "direct", ours: "retry"}
	tests := []struct {
		lib        string
		ours, peer bool
	}{
		{lib: "retry", ours: true},
		{lib: "retry-timer", ours: true},
		{lib: "direct"},
		{lib: "cenkalti", peer: true},
		{lib: "avast", peer: true},
		{lib: "retryish", peer: true},
	}
	for _, tt := range tests {
		t.Run(tt.lib, func(t *testing.T) {
			assert.Equalf(t, tt.ours, o.isOurs(tt.lib), "isOurs(%q) = %v, want %v", tt.lib, o.isOurs(tt.lib), tt.ours)
			assert.Equalf(t, tt.peer, o.isPeer(tt.lib), "isPeer(%q) = %v, want %v", tt.lib, o.isPeer(tt.lib), tt.peer)
		})
	}
}

// FuzzParse feeds arbitrary text to the parser and the table writer: bad
// input gives an error or a table, never a panic.
func FuzzParse(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join("testdata", "raw.txt"))
	require.NoError(f, err)
	f.Add(string(raw))
	f.Add("BenchmarkSuccess/lib=retry-2 \t 100 \t 52.0 ns/op \t 0 B/op \t 0 allocs/op\n")
	f.Add("BenchmarkX-2 1 NaN ns/op\n")
	f.Add("BenchmarkX/lib=-0 0 -1 ns/op 5 weird\n")
	f.Add("goos: linux\ncpu: x\n")
	f.Fuzz(func(t *testing.T, s string) {
		rep, err := parse(strings.NewReader(s))
		if err != nil {
			return
		}
		_ = rep.markdown(options{date: "2026-11-30", floor: "direct", ours: "retry"})
	})
}
