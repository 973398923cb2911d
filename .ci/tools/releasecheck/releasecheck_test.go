package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// repoFiles is a small repository with the shape of ours: a root module, a
// nested module that needs it, and an unpublished benchmarks module whose
// requirement exists nowhere (so the check fails if it tries to publish it).
func repoFiles(subRequires string) map[string]string {
	return map[string]string{
		"LICENSE":         "license text\n",
		"CHANGELOG.md":    "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-01-31\n\n- First.\n",
		"go.mod":          "module example.com/r\n\ngo 1.25\n",
		"r.go":            "package r\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n",
		"internal/x/x.go": "package x\n",
		"sub/go.mod": "module example.com/r/sub\n\ngo 1.25\n\nrequire example.com/r " + subRequires +
			"\n\nreplace example.com/r => ../\n",
		"sub/sub.go":         "package sub\n\nimport \"example.com/r\"\n\n// Hello greets too.\nfunc Hello() string { return r.Hello() }\n",
		"benchmarks/go.mod":  "module example.com/r/benchmarks\n\ngo 1.25\n\nrequire example.com/nowhere v1.0.0\n",
		"benchmarks/b.go":    "package benchmarks\n",
		".ci/tools/go.mod":   "module tools\n\ngo 1.25\n",
		".ci/tools/tools.go": "package tools\n",
	}
}

// newRepo commits files to a new git repository and returns its folder.
func newRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "test"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

func runCheck(t *testing.T, repo string, consumers fstest.MapFS) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go command a dozen times")
	}
	var out bytes.Buffer
	err := check(config{repo: repo, consumers: consumers, out: &out})
	return out.String(), err
}

func TestCheckPasses(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, repoFiles("v0.1.0"))
	consumers := fstest.MapFS{"sub/main.go": {Data: []byte(`package main

import (
	"fmt"
	"os"

	"example.com/r/sub"
)

func main() {
	if sub.Hello() != "hello" {
		os.Exit(1)
	}
	fmt.Println("said hello")
}
`)}}
	out, err := runCheck(t, repo, consumers)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"version v0.1.0 (from CHANGELOG.md)",
		"example.com/r: tag v0.1.0",
		"example.com/r/sub: tag sub/v0.1.0",
		"example.com/r: no program in testdata/consumers/r/main.go",
		"sub alone: go get, go mod tidy, go build passed; it ran: said hello",
		"all 2 modules in one module",
		"passed in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"benchmarks", "tools"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("report mentions %s, which is never published:\n%s", unwanted, out)
		}
	}
}

// The case of issue 19: a nested module that requires a root version the
// release does not tag installs with replace, and not without.
func TestCheckFailsOnARootVersionNotReleased(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, repoFiles("v0.0.9"))
	out, err := runCheck(t, repo, fstest.MapFS{})
	if err == nil {
		t.Fatalf("check passed with sub requiring example.com/r v0.0.9:\n%s", out)
	}
	if msg := err.Error(); !strings.Contains(msg, "example.com/r@v0.0.9") || !strings.Contains(msg, "proxy") {
		t.Errorf("error does not name the missing version in the proxy: %v", err)
	}
}

// A program that finds a wrong result fails the check.
func TestCheckFailsWhenAProgramFails(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, repoFiles("v0.1.0"))
	consumers := fstest.MapFS{"r/main.go": {Data: []byte("package main\n\nimport (\n\t\"os\"\n\n\t\"example.com/r\"\n)\n\nfunc main() {\n\tif r.Hello() != \"bonjour\" {\n\t\tos.Exit(3)\n\t}\n}\n")}}
	out, err := runCheck(t, repo, consumers)
	if err == nil || !strings.Contains(err.Error(), "the program that uses example.com/r: exit status 3") {
		t.Fatalf("check: %v, want the program's failure\n%s", err, out)
	}
}

// The version comes from -version when given, and must be canonical.
func TestCheckVersion(t *testing.T) {
	t.Parallel()
	mods := []mod{{path: "example.com/r", dir: "."}, {path: "example.com/r/sub", dir: "sub"}}
	for _, v := range []string{"v0.1.0", "v1.2.3", "v0.2.0-rc.1"} {
		if err := checkVersion(v, mods); err != nil {
			t.Errorf("checkVersion(%q) = %v, want nil", v, err)
		}
	}
	for _, v := range []string{"0.1.0", "v0.1", "v2.0.0", "latest", ""} {
		if err := checkVersion(v, mods); err == nil {
			t.Errorf("checkVersion(%q) = nil, want an error", v)
		}
	}
}

func TestReleaseVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		changelog, want string
	}{
		{"## [Unreleased]\n\n## [0.2.0] - 2026-02-01\n\n## [0.1.0] - 2026-01-01\n", "v0.2.0"},
		{"## [v1.0.0-rc.1]\n", "v1.0.0-rc.1"},
		{"## [Unreleased]\n", ""},
		{"### [0.1.0]\n", ""},
	}
	for _, tt := range tests {
		repo := newRepo(t, map[string]string{"CHANGELOG.md": tt.changelog, "go.mod": "module example.com/r\n"})
		c, err := openCommit(repo, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.releaseVersion()
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("releaseVersion(%q) = %q, %v; want %q", tt.changelog, got, err, tt.want)
		}
	}
}

func TestUnpublished(t *testing.T) {
	t.Parallel()
	for dir, want := range map[string]bool{
		".": false, "retrygrpc": false, "retrypg": false, "a/b": false, "retryriver/benchmarks": false,
		"benchmarks": true, "examples": true, "examples/x": true, ".ci/tools": true, "_old": true, "a/testdata/m": true,
		"retryriver/cmd/outage": false,
	} {
		if got := unpublished(dir); got != want {
			t.Errorf("unpublished(%q) = %v, want %v", dir, got, want)
		}
	}
}

// An uncommitted change to a tracked file is part of what is checked, and
// an untracked file is not.
func TestOpenCommitTakesUncommittedChanges(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, repoFiles("v0.1.0"))
	if err := os.WriteFile(filepath.Join(repo, "r.go"), []byte("package r // changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "new.go"), []byte("package r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := openCommit(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := c.file("r.go"); err != nil || string(data) != "package r // changed\n" {
		t.Errorf("r.go = %q, %v; want the uncommitted change", data, err)
	}
	if _, err := c.file("new.go"); err == nil {
		t.Error("an untracked file is in the commit")
	}
	head, err := openCommit(repo, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := head.file("r.go"); strings.Contains(string(data), "changed") {
		t.Error("-rev HEAD took the uncommitted change")
	}
}
