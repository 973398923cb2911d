package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/internal/sim"
)

// readmeSection returns the text of retrysim's README from the line
// starting with from up to the next line starting with to.
func readmeSection(t *testing.T, from, to string) string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	require.NoError(t, err)
	s := string(data)
	i := strings.Index(s, "\n"+from)
	require.GreaterOrEqual(t, i, 0, "README has no %q", from)
	j := strings.Index(s[i+1:], "\n"+to)
	require.GreaterOrEqual(t, j, 0, "README has no %q after %q", to, from)
	return s[i+1 : i+1+j]
}

// number finds the figures a README section quotes: counts of 100 and
// more, decimals and percentages.
var number = regexp.MustCompile(`\d{1,3}(,\d{3})+|\d+\.\d+|\d+%|\d{3,}`)

// assertQuotedArePrinted checks that every figure text quotes is one out
// prints.
func assertQuotedArePrinted(t *testing.T, section, text, out string) {
	t.Helper()
	printed := map[string]bool{}
	for _, n := range number.FindAllString(out, -1) {
		printed[n] = true
	}
	quoted := number.FindAllString(text, -1)
	require.NotEmpty(t, quoted)
	for _, n := range quoted {
		assert.True(t, printed[n], "the README's %s quotes %s, which the command does not print", section, n)
	}
}

// TestREADMEDrillNumbersAreTheCommands checks that every number the
// README's drill section quotes is one the drill prints at its defaults.
func TestREADMEDrillNumbersAreTheCommands(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-study", "drill", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = drillStudy(c, &out, io.Discard)
	require.NoError(t, err)
	assertQuotedArePrinted(t, "drill", readmeSection(t, "## The outage drill", "## The hedging study"), out.String())
}

// TestREADMEHedgingNumbersAreTheCommands checks the hedging section the
// same way, against the study at its defaults.
func TestREADMEHedgingNumbersAreTheCommands(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-study", "hedging", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = hedgingStudy(c, &out, io.Discard)
	require.NoError(t, err)
	text := readmeSection(t, "## The hedging study", "## The ingestion pipeline")
	assertQuotedArePrinted(t, "hedging study", text, out.String())
	// Its tables' rows are the command's rows, figure for figure, in order:
	// the first table's at half the capacity, the second's overloaded.
	var printed [2]map[string]string
	table := -1
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "At half its capacity"), strings.HasPrefix(line, "Overloaded:"):
			table++
			printed[table] = map[string]string{}
		case table >= 0:
			if m := regexp.MustCompile(`^\s*([a-z0-9 ,]+?)\s{2,}\d`).FindStringSubmatch(line); m != nil {
				printed[table][m[1]] = strings.Join(number.FindAllString(line, -1), " ")
			}
		}
	}
	require.Equal(t, 1, table, "two tables")
	table = -1
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "| variant |") {
			table++
			continue
		}
		cells := strings.Split(line, "|")
		if table < 0 || len(cells) < 4 || strings.HasPrefix(line, "|---") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimSpace(cells[1]), " (with or without the budget)")
		quoted := strings.Join(number.FindAllString(strings.Join(cells[2:], "|"), -1), " ")
		row, ok := printed[table][name]
		require.True(t, ok, "the README's table %d has a row %q the command does not print", table, name)
		assert.True(t, containsInOrder(row, quoted), "the README's row for %s, %q, is not the command's: %q", name, quoted, row)
		if name != strings.TrimSpace(cells[1]) {
			assert.Equal(t, row, printed[table][name+", budget"], "%s: with the budget alike", name)
		}
		rows++
	}
	assert.Equal(t, 4+7, rows)
}

// containsInOrder reports whether the words of sub appear in s in order.
func containsInOrder(s, sub string) bool {
	words := strings.Fields(s)
	i := 0
	for _, w := range strings.Fields(sub) {
		for i < len(words) && words[i] != w {
			i++
		}
		if i == len(words) {
			return false
		}
		i++
	}
	return true
}

// TestREADMELiveIsTheCommand checks the figures of the live runs the
// README gives: their sizes, which the tests cannot time.
func TestREADMELiveIsTheCommand(t *testing.T) {
	t.Parallel()
	text := strings.Join(strings.Fields(readmeSection(t, "## Live runs", "## Flags")), " ")
	assert.Contains(t, text, fmt.Sprintf("%d goroutines send through", defaultLiveJobs))
	assert.Contains(t, text, fmt.Sprintf("%s GET calls, %d at a time", count(defaultLiveCalls), liveConcurrency))
	assert.Contains(t, text, fmt.Sprintf("HedgeDelay: retry.Constant(%v)", liveHedgeDelay))
	assert.Contains(t, text, fmt.Sprintf("hangs for %s", dur(liveOutage)))
	z := defaultLiveIngest
	assert.Contains(t, text, fmt.Sprintf("%s writes left by a %s outage, %s writers", count(z.writes), dur(z.outage), count(z.writers)))
	assert.Contains(t, text, fmt.Sprintf("serves C = %d writes at once, each sleeping 8 to 12 ms (%s a second)", liveIngestSlots, count(liveIngestRate)))
	assert.Contains(t, text, fmt.Sprintf("drained %s after the return stops", dur(z.horizon)))
}

// TestREADMETimings checks that the run time the README's opening quotes
// is the timings table's, and that the table lists commands that exist.
func TestREADMETimings(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lead := regexp.MustCompile(`The default run takes ([\d.]+) s and ([\d.]+) s of CPU`).FindStringSubmatch(string(data))
	require.Len(t, lead, 3, "the opening says how long the default run takes")
	table := readmeSection(t, "| command |", "The contention sweep is most")
	row := regexp.MustCompile("(?m)^\\| `retrysim` \\| ([\\d.]+) s \\| [\\d.]+ s, ([\\d.]+) s").FindStringSubmatch(table)
	require.Len(t, row, 3, "the table has the default run")
	assert.Equal(t, lead[2], row[1], "CPU time")
	assert.Equal(t, lead[1], strings.TrimSuffix(row[2], "0"), "median wall time")
	for _, m := range regexp.MustCompile("`retrysim([^`]*)`").FindAllStringSubmatch(table, -1) {
		_, err := parseFlags(append(strings.Fields(m[1]), "-out", t.TempDir()), io.Discard)
		assert.NoError(t, err, "retrysim%s", m[1])
	}
}

// TestREADMEContentionNumbersAreTheCommands checks the contention study's
// figures the README quotes: the largest deviations from the published
// means at N = 100 and N = 10, and the calls at 190 clients, as the default
// run computes and prints them.
func TestREADMEContentionNumbersAreTheCommands(t *testing.T) {
	t.Parallel()
	// Compared with the lines joined, so that rewrapping the README does
	// not matter.
	text := strings.Join(strings.Fields(readmeSection(t, "## The contention study", "## The outage drill")), " ")
	var callsDev100, timeDev100, callsDev10 float64
	calls190 := map[string]float64{}
	for _, st := range sim.Strategies() {
		for _, n := range []int{10, 100, 190} {
			p := sim.RunPoint(st, n, defaultEpisodes, 1)
			ref, ok := sim.LookupReference(st.Name, n)
			switch {
			case n == 190:
				calls190[st.Name] = p.Calls
			case n == 100 && ok:
				callsDev100 = max(callsDev100, math.Abs(100*(p.Calls/ref.Calls-1)))
				timeDev100 = max(timeDev100, math.Abs(100*(p.Time.Seconds()/ref.Time.Seconds()-1)))
			case n == 10 && ok:
				callsDev10 = max(callsDev10, math.Abs(100*(p.Calls/ref.Calls-1)))
			}
		}
	}
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", v) }
	assert.Contains(t, text, "At N = 100 it is within "+pct(callsDev100)+" of the published means on calls and "+pct(timeDev100)+" on time")
	assert.Contains(t, text, "at N = 10 within "+pct(callsDev10)+" on calls")
	calls := func(name string) string { return count(int(math.Round(calls190[name]))) }
	assert.Contains(t, text, fmt.Sprintf("At 190 clients full jitter needs %s write calls, exponential backoff without jitter %s and no backoff %s.",
		calls("full jitter"), calls("exponential"), calls("no backoff")))
}

// TestREADMEIngestNumbersAreTheCommands checks the ingestion section: every
// figure it quotes is one the study prints at its defaults, and its
// tables' rows are the command's rows, figure for figure.
func TestREADMEIngestNumbersAreTheCommands(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-study", "ingest", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = ingestStudy(c, &out, io.Discard)
	require.NoError(t, err)
	text := readmeSection(t, "## The ingestion pipeline", "## Live runs")
	assertQuotedArePrinted(t, "ingestion study", text, out.String())
	// The command's rows, by table: "" for the backlog, "halves" and
	// "doubles" for the change of C.
	printed := map[string]map[string]string{}
	table := ""
	row := regexp.MustCompile(`^\s*([a-z +]+?(?: \(\d+\))?)\s{2,}(\d|not)`)
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "The backlog after the outage"):
			table = "backlog"
		case strings.HasPrefix(line, "C halves"):
			table = "halves"
		case strings.HasPrefix(line, "C doubles"):
			table = "doubles"
		case line == "":
			table = ""
		case table != "":
			if m := row.FindStringSubmatch(line); m != nil {
				if printed[table] == nil {
					printed[table] = map[string]string{}
				}
				rest := line[len(m[0])-len(m[2]):] // the cells after the name
				printed[table][m[1]] = strings.Join(number.FindAllString(rest, -1), " ")
			}
		}
	}
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| variant") || strings.HasPrefix(line, "| C |") {
			continue
		}
		table, name, rest := "backlog", strings.TrimSpace(cells[1]), cells[2:]
		if name == "halves" || name == "doubles" {
			table, name, rest = name, strings.TrimSpace(cells[2]), cells[3:]
		}
		quoted := strings.Join(number.FindAllString(strings.Join(rest, "|"), -1), " ")
		got, ok := printed[table][name]
		require.True(t, ok, "the README's %s table has a row %q the command does not print", table, name)
		assert.Equal(t, got, quoted, "the README's %s row for %s is not the command's", table, name)
		rows++
	}
	assert.Equal(t, 3*5, rows)
}
