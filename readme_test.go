package retry_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMarkdownLinks checks every relative link in the repository's Markdown
// files: the file or folder it names exists, and a #fragment names a heading
// of the file it points to. Links to other sites are not fetched.
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files, want the README and the modules' READMEs at least", len(files))
	}
	links := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(text), true), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, fragment, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
					continue
				}
			}
			if fragment == "" {
				continue
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s: link %q: a #fragment into a folder or unreadable file: %v", file, target, err)
				continue
			}
			if !hasAnchor(string(body), fragment) {
				t.Errorf("%s: link %q: %s has no heading %q", file, target, dest, fragment)
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found: the pattern is broken")
	}
}

// mdLink matches an inline Markdown link or image: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// stripCode blanks out fenced code blocks, and inline code if inline, whose
// brackets are Go, not links.
func stripCode(s string, inline bool) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if fenced {
			b.WriteString("\n")
			continue
		}
		if inline {
			line = inlineCode.ReplaceAllString(line, "``")
		}
		b.WriteString(line)
	}
	return b.String()
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// hasAnchor reports whether a Markdown text has a heading whose GitHub
// anchor is fragment: lower case, spaces as hyphens, punctuation dropped.
func hasAnchor(text, fragment string) bool {
	for _, line := range strings.Split(stripCode(text, false), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		if anchor(heading) == fragment {
			return true
		}
	}
	return false
}

func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocsSayWhatTheSoftwareDoes keeps the project's own planning out of the
// user documentation: no Markdown file but CHANGELOG.md (whose history may
// name them) refers to "issue 20", "item 2" or "#20", which mean nothing to
// a reader of a release.
func TestDocsSayWhatTheSoftwareDoes(t *testing.T) {
	t.Parallel()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") || path == "CHANGELOG.md" {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(text), "\n") {
			if m := planningRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q refers to the project's planning; say what the software does instead", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("checked %d Markdown files, want the README and the modules' READMEs at least", checked)
	}
	for _, s := range []string{"issue 20", "Issue #22", "item 2", "items 3", "(#20)", "issue 22's target"} {
		if !planningRef.MatchString(s) {
			t.Errorf("planningRef misses %q", s)
		}
	}
	for _, s := range []string{"golang/go#75804", "Retry-After: 120", "the first item", "issues/75804"} {
		if planningRef.MatchString(s) {
			t.Errorf("planningRef matches %q, which is no planning reference", s)
		}
	}
}

// planningRef matches a reference to an issue or to one of its items.
var planningRef = regexp.MustCompile(`(?i)\b(?:issues?|items?)\s+#?[0-9]+|(?:^|[\s(])#[0-9]+\b`)
