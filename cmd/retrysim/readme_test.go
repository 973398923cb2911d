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

// readmeSection returns the README's text from the line starting with from
// up to the next line starting with to.
func readmeSection(t *testing.T, from, to string) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	s := string(data)
	i := strings.Index(s, "\n"+from)
	require.GreaterOrEqual(t, i, 0, "README has no %q", from)
	j := strings.Index(s[i+1:], "\n"+to)
	require.GreaterOrEqual(t, j, 0, "README has no %q after %q", to, from)
	return s[i+1 : i+1+j]
}

// TestREADMEDrillNumbersAreTheCommands checks that every number the
// README's drill paragraphs quote (counts of 100 and more, decimals and
// percentages) is one the drill prints at its defaults.
func TestREADMEDrillNumbersAreTheCommands(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-study", "drill", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = drillStudy(c, &out, io.Discard)
	require.NoError(t, err)
	printed := map[string]bool{}
	number := regexp.MustCompile(`\d{1,3}(,\d{3})+|\d+\.\d+|\d+%|\d{3,}`)
	for _, n := range number.FindAllString(out.String(), -1) {
		printed[n] = true
	}
	text := readmeSection(t, "**The outage drill**", "Flags:")
	quoted := number.FindAllString(text, -1)
	require.NotEmpty(t, quoted)
	for _, n := range quoted {
		assert.True(t, printed[n], "the README quotes %s, which the drill does not print", n)
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
	text := strings.Join(strings.Fields(readmeSection(t, "**The contention study**", "**The outage drill**")), " ")
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
