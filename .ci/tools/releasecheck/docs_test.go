package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListTheReleasedModules checks that RELEASING.md's table of modules
// and the modules CHANGELOG.md says are released together are exactly the
// modules this tool publishes, from the repository as it is, so that
// following RELEASING.md tags every module the tool checks, and no other.
// It also checks that no command in RELEASING.md names a nested module by
// hand: the steps read the list from -list.
func TestDocsListTheReleasedModules(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	c, err := openCommit(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := c.published()
	if err != nil {
		t.Fatal(err)
	}
	var paths, dirs []string
	for _, m := range mods {
		paths = append(paths, m.path)
		if m.dir != "." {
			dirs = append(dirs, m.dir)
		}
	}
	if !slices.Contains(dirs, "retrypg") || !slices.Contains(dirs, "retryriver/cmd/outage") {
		t.Fatalf("published modules %v: the rule lost retrypg or retryriver/cmd/outage", dirs)
	}

	releasing := readFile(t, filepath.Join(repo, "RELEASING.md"))
	var table []string
	for _, m := range tableRow.FindAllStringSubmatch(releasing, -1) {
		table = append(table, m[1])
		dir := strings.TrimSuffix(m[2], "/")
		if want := strings.TrimPrefix(strings.TrimPrefix(m[1], mods[0].path), "/"); dir != want && !(dir == "." && want == "") {
			t.Errorf("RELEASING.md: %s is in folder %q, want %q", m[1], m[2], want)
		}
		if want := strings.TrimPrefix(dir+"/vX.Y.Z", "./"); m[3] != want {
			t.Errorf("RELEASING.md: %s is tagged %q, want %q", m[1], m[3], want)
		}
	}
	if !slices.Equal(table, paths) {
		t.Errorf("RELEASING.md's table lists\n\t%v\nthe release tool publishes\n\t%v", table, paths)
	}
	for _, block := range codeBlocks(releasing) {
		for _, d := range dirs {
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(d) + `\b`).MatchString(block) {
				t.Errorf("RELEASING.md: a command names %s by hand; read the list from .ci/release -list:\n%s", d, block)
			}
		}
	}

	changelog := readFile(t, filepath.Join(repo, "CHANGELOG.md"))
	_, list, ok := strings.Cut(changelog, "released together, at one version:")
	if !ok {
		t.Fatal(`CHANGELOG.md lacks "released together, at one version:", the list of the modules`)
	}
	list, _, _ = strings.Cut(list, ". ")
	list = parenthesis.ReplaceAllString(list, "")
	var named []string
	for _, m := range backticked.FindAllStringSubmatch(list, -1) {
		name := m[1]
		if name != mods[0].path {
			name = mods[0].path + "/" + name
		}
		named = append(named, name)
	}
	if !slices.Equal(sorted(named), sorted(paths)) {
		t.Errorf("CHANGELOG.md says these modules are released together\n\t%v\nthe release tool publishes\n\t%v", named, paths)
	}
}

var (
	// tableRow is a row of RELEASING.md's table: module, folder, tag.
	tableRow    = regexp.MustCompile("(?m)^\\| `([^`]+)`[^|]*\\| `([^`]+)` \\| `([^`]+)` \\|$")
	parenthesis = regexp.MustCompile(`\([^)]*\)`)
	backticked  = regexp.MustCompile("`([^`]+)`")
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// codeBlocks returns the fenced code blocks of a Markdown text.
func codeBlocks(text string) []string {
	var blocks []string
	var b strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if in {
				blocks = append(blocks, b.String())
				b.Reset()
			}
			in = !in
			continue
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return blocks
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
