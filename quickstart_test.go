package retry_test

import (
	"bytes"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEInstallAndQuickStart does what the README tells a newcomer to
// do, in a new module: the Install section's commands, with this repository
// as the clone, then the Quick start's program pasted into main.go and run.
// What it prints must be what the README says it prints. The go commands
// may use the module cache but not the network (GOPROXY=off), and nothing
// of ours may end up in the new module's go.sum: the replace names a
// folder, so a copy made from a clone never enters the module cache.
func TestREADMEInstallAndQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program in a module of its own")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on the PATH")
	}
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	install := section(t, string(readme), "## Install")
	quick := section(t, string(readme), "## Quick start")
	blocks := fenced(install)
	require.NotEmpty(t, blocks, "the Install section has no commands")
	steps := blocks[0]
	code := fenced(quick)
	require.Len(t, code, 2, "the Quick start has the program, then what it prints")
	program, output := code[0], code[1]
	require.True(t, strings.HasPrefix(strings.TrimLeft(regexp.MustCompile(`(?m)^//.*\n`).ReplaceAllString(program, ""), "\n"), "package main\n"),
		"the Quick start's first block is not a whole program:\n%s", program)

	clone, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	env := append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "go %s:\n%s", strings.Join(args, " "), stderr.String())
		return stdout.String()
	}
	run("mod", "init", "example.com/quickstart")
	ran := 0
	for _, line := range strings.Split(strings.TrimSpace(steps), "\n") {
		fields := strings.Fields(strings.ReplaceAll(line, "/path/to/retry", clone))
		switch {
		case len(fields) == 0:
		case fields[0] == "git" || fields[0] == "cd":
			// The clone is this repository, and the module is dir.
		case fields[0] == "go":
			run(fields[1:]...)
			ran++
		default:
			t.Fatalf("the Install section's command %q is neither git, cd nor go: this test cannot follow it", line)
		}
	}
	require.GreaterOrEqual(t, ran, 2, "the Install section's go commands")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	run("mod", "tidy")
	assert.Equal(t, output, run("run", "."), "what the Quick start prints")

	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	require.NoError(t, err)
	assert.NotContains(t, string(sum), "github.com/seed93a044d1/retry", "go.sum holds a copy of ours")
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(mod), "replace github.com/seed93a044d1/retry => "+clone)
}

// section returns the part of a Markdown text from the heading to the next
// heading of the same level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
	require.True(t, ok, "the README has no %q", heading)
	level := heading[:strings.Index(heading, " ")+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// fenced returns the contents of the fenced code blocks of a Markdown text.
func fenced(text string) []string {
	var blocks []string
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(line, "```") {
			if in {
				blocks = append(blocks, b.String())
				b.Reset()
			}
			in = !in
			continue
		}
		if in {
			b.WriteString(line)
		}
	}
	return blocks
}

// TestNestedREADMEsInstall follows the install commands of each nested
// module's README in a new module, as TestREADMEInstallAndQuickStart does
// for the root's: with this repository as the clone, a program that
// imports the module builds, and nothing of ours is in its go.sum. Unlike
// the root's test, it may fetch third-party modules through GOPROXY: this
// test may run before the nested module's own tests have filled the module
// cache on a fresh machine. Ours are never fetched: the replace names
// folders.
func TestNestedREADMEsInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a module of its own for each nested module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on the PATH")
	}
	t.Parallel()
	clone, err := filepath.Abs(".")
	require.NoError(t, err)
	for _, name := range []string{"retrygrpc", "retryotel", "retrypg", "retryriver"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			readme, err := os.ReadFile(filepath.Join(name, "README.md"))
			if os.IsNotExist(err) {
				t.Skip("not in a clone: the nested modules are not part of the root module")
			}
			require.NoError(t, err)
			var steps string
			for _, b := range fenced(string(readme)) {
				if strings.Contains(b, "go mod edit") {
					steps = b
					break
				}
			}
			require.NotEmpty(t, steps, "%s/README.md has no install commands", name)
			mod, err := os.ReadFile(filepath.Join(name, "go.mod"))
			require.NoError(t, err)
			if m := goLine.FindSubmatch(mod); m != nil && version.Compare("go"+string(m[1]), runtime.Version()) > 0 {
				t.Skipf("%s needs go %s; this is %s", name, m[1], runtime.Version())
			}
			dir := t.TempDir()
			env := append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
			run := func(args ...string) {
				t.Helper()
				cmd := exec.Command(gobin, args...)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
			}
			run("mod", "init", "example.com/try")
			// Lines ending in a backslash continue on the next one.
			for _, line := range strings.Split(strings.ReplaceAll(strings.TrimSpace(steps), "\\\n", " "), "\n") {
				fields := strings.Fields(strings.ReplaceAll(line, "/path/to/retry", clone))
				require.Equal(t, "go", fields[0], "%s/README.md: %q is not a go command", name, line)
				run(fields[1:]...)
			}
			program := "package main\n\nimport _ \"github.com/seed93a044d1/retry/" + name + "\"\n\nfunc main() {}\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
			run("mod", "tidy")
			run("build", "-o", os.DevNull, ".")
			sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
			require.NoError(t, err)
			assert.NotContains(t, string(sum), "github.com/seed93a044d1/retry", "go.sum holds a copy of ours")
		})
	}
}

// goLine is the go line of a go.mod file.
var goLine = regexp.MustCompile(`(?m)^go ([0-9.]+)\s*$`)
