package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets a test run the real command, exit status included: with
// RETRYSIM_AS_COMMAND=1 the test binary is retrysim itself.
func TestMain(m *testing.M) {
	if os.Getenv("RETRYSIM_AS_COMMAND") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// command runs the test binary as retrysim with args and returns its exit
// status and standard error.
func command(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RETRYSIM_AS_COMMAND=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "-help", "--help"} {
		code, stderr := command(t, arg)
		assert.Equal(t, 0, code, "%s exits with status %d, want 0", arg, code)
		assert.Contains(t, stderr, "Usage: retrysim [flags]")
		for _, f := range []string{"-study", "-quick", "-live", "-clients", "-episodes", "-jobs", "-calls", "-writes", "-seed", "-workers", "-out"} {
			assert.Regexp(t, `(?m)^  `+f+`( |$)`, stderr, "-h lists %s", f)
		}
		assert.NotContains(t, stderr, "retrysim: flag: help requested")
	}
}

func TestBadFlagExitsTwo(t *testing.T) {
	t.Parallel()
	code, stderr := command(t, "-nope")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "flag provided but not defined: -nope")
	code, stderr = command(t, "-study", "both")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `retrysim: -study: "both" is not contention, drill, hedging, ingest or all`)
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	assert.Equal(t, 0, exitCode(nil, &stderr))
	assert.Equal(t, 0, exitCode(flag.ErrHelp, &stderr))
	assert.Empty(t, stderr.String(), "-h has printed the usage already")
	assert.Equal(t, 2, exitCode(errors.New("disk full"), &stderr))
	assert.Equal(t, "retrysim: disk full\n", stderr.String())
}

// TestLiveAlone checks that -live on its own runs the live drill and
// nothing else. It sends real requests to a loopback server (a smaller run
// than the command's, a few seconds), so it makes no claim on timings.
func TestLiveAlone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := parseFlags([]string{"-live", "-out", dir}, &strings.Builder{})
	require.NoError(t, err)
	assert.Equal(t, "none", c.study)
	assert.Equal(t, defaultLiveJobs, c.liveJobs)
	c.liveJobs = 40
	c.liveCalls = 60
	assert.Equal(t, defaultLiveIngest, c.liveIngest)
	c.liveIngest = liveIngestSize{writes: 200, writers: 40, outage: 200 * time.Millisecond, horizon: time.Second}
	var stdout, stderr bytes.Buffer
	require.NoError(t, execute(c, &stdout, &stderr), stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "LIVE DRILL: 40 jobs")
	assert.NotContains(t, out, "CONTENTION STUDY")
	assert.NotContains(t, out, "OUTAGE DRILL")
	assert.Contains(t, out, "What each run shows:")
	assert.Contains(t, out, "LIVE HEDGING: 60 GET calls")
	for _, run := range []string{"HTTP/2, no hedging", "HTTP/2, hedge at 10ms", "HTTP/1.1, no hedging", "HTTP/1.1, hedge at 10ms"} {
		assert.Contains(t, out, run)
	}
	assert.Contains(t, out, "What it shows: For real over HTTP/2, hedging at 10ms takes the p99.9 from")
	assert.NotContains(t, out, "HEDGING STUDY")
	// The ingestion check: its rows, whatever the machine's speed made of
	// their figures.
	assert.Contains(t, out, "LIVE INGESTION: 200 writes left by a 0.2 s outage, 40 writers")
	for _, name := range []string{"no bound", "rate limit alone", fmt.Sprintf("fixed limit (%d)", liveIngestSlots), "adaptive limit", "adaptive + breaker"} {
		assert.Regexp(t, `(?m)^\s+`+regexp.QuoteMeta(name)+`\s+(\d|not in)`, out)
	}
	assert.Contains(t, out, "What it shows: With no bound the 40 writers hold up to")
	assert.NotContains(t, out, "INGESTION PIPELINE")
	assert.Contains(t, out, "Charts (3 SVG files) written to "+dir)
	for _, name := range []string{"drill-live-as-given.svg", "drill-live-no-limiter.svg", "ingest-live.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.NoError(t, wellFormed(data), name)
	}
	assert.NotContains(t, stderr.String(), "contention:")
	assert.NotContains(t, stderr.String(), "drill: as given")
}

// TestLiveWithStudy checks that -live with -study runs the study as well.
func TestLiveWithStudy(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-live", "-study", "drill"}, &strings.Builder{})
	require.NoError(t, err)
	assert.Equal(t, "drill", c.study)
	assert.True(t, c.live)
	_, err = parseFlags([]string{"-study", "none"}, &strings.Builder{})
	assert.Error(t, err, "none is only what -live alone means")
}
