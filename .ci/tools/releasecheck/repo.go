package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// commit is the state of the repository being released: one commit, read
// through git, never through the working tree, so that what is checked is
// what a tag would point at.
type commit struct {
	top   string    // the repository's top folder
	rev   string    // the commit's hash
	what  string    // how the commit was chosen, for the report
	when  time.Time // its commit time: the time of the versions' .info
	files []*zip.File
}

// openCommit reads the commit named by rev ("" = HEAD with the uncommitted
// changes to tracked files) of the repository holding dir.
func openCommit(dir, rev string) (*commit, error) {
	top, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	c := &commit{top: top}
	switch {
	case rev != "":
		c.what = rev
	default:
		// git stash create records the working tree's tracked files as a
		// commit, touching neither the tree nor any ref; it prints nothing
		// when there is no change, and HEAD is then the commit.
		if rev, err = git(top, "stash", "create"); err != nil {
			return nil, err
		}
		c.what = "HEAD with uncommitted changes to tracked files"
		if rev == "" {
			rev, c.what = "HEAD", "HEAD"
		}
	}
	if c.rev, err = git(top, "rev-parse", "--verify", rev+"^{commit}"); err != nil {
		return nil, err
	}
	when, err := git(top, "show", "-s", "--format=%cI", c.rev)
	if err != nil {
		return nil, err
	}
	if c.when, err = time.Parse(time.RFC3339, when); err != nil {
		return nil, fmt.Errorf("commit time %q: %w", when, err)
	}
	// The same archive the go command reads when it fetches a module from
	// git: only committed files, line endings as committed.
	archive, err := gitBytes(top, "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", c.rev)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return nil, fmt.Errorf("git archive: %w", err)
	}
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, "/") {
			c.files = append(c.files, f)
		}
	}
	return c, nil
}

// file returns the content of the commit's file at name, a slash path from
// the repository's top.
func (c *commit) file(name string) ([]byte, error) {
	for _, f := range c.files {
		if f.Name == name {
			return read(f)
		}
	}
	return nil, fmt.Errorf("%s: not in commit %.12s", name, c.rev)
}

func read(f *zip.File) ([]byte, error) {
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// extract writes the commit's files under dir.
func (c *commit) extract(dir string) error {
	for _, f := range c.files {
		if !f.Mode().IsRegular() {
			continue
		}
		data, err := read(f)
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(name, data, f.Mode().Perm()|0o200); err != nil {
			return err
		}
	}
	return nil
}

// mod is one published module of the commit.
type mod struct {
	path  string // module path
	dir   string // folder from the repository's top, "." for the root
	goMod []byte // its go.mod, as committed
	goVer string // its go line
}

// name is the last element of the module's path: the name of the program
// that uses it.
func (m mod) name() string { return path.Base(m.path) }

// tag is the git tag that publishes the module at version v: v for the
// root module, DIR/v for a nested one.
func (m mod) tag(v string) string {
	if m.dir == "." {
		return v
	}
	return m.dir + "/" + v
}

// unpublished reports whether a folder's module is left out of releases:
// the comparisons with other libraries, the recipes, test data and the
// tooling under folders named with a leading dot or underscore. Every other
// module is published, a command's own module (retryriver/cmd/outage)
// included: this rule is the one list of what a release tags, which
// RELEASING.md and CHANGELOG.md follow (a test checks that they do).
func unpublished(dir string) bool {
	if dir == "." {
		return false
	}
	for i, elem := range strings.Split(dir, "/") {
		switch {
		case i == 0 && (elem == "benchmarks" || elem == "examples"),
			elem == "testdata", strings.HasPrefix(elem, "."), strings.HasPrefix(elem, "_"):
			return true
		}
	}
	return false
}

// published finds the commit's published modules, the root first. Each
// nested module's path must be the root's path and its folder, or a tag at
// that folder would not publish it.
func (c *commit) published() ([]mod, error) {
	var mods []mod
	for _, f := range c.files {
		if path.Base(f.Name) != "go.mod" {
			continue
		}
		dir := path.Dir(f.Name)
		if unpublished(dir) {
			continue
		}
		data, err := c.file(f.Name)
		if err != nil {
			return nil, err
		}
		mf, err := modfile.ParseLax(f.Name, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s: no module line", f.Name)
		}
		m := mod{path: mf.Module.Mod.Path, dir: dir, goMod: data}
		if mf.Go != nil {
			m.goVer = mf.Go.Version
		}
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b mod) int { return strings.Compare(a.dir, b.dir) })
	if len(mods) == 0 || mods[0].dir != "." {
		return nil, errors.New("no go.mod at the repository's top")
	}
	for _, m := range mods[1:] {
		if want := mods[0].path + "/" + m.dir; m.path != want {
			return nil, fmt.Errorf("%s/go.mod says module %s, but the tag %s publishes %s", m.dir, m.path, m.tag("vX.Y.Z"), want)
		}
	}
	return mods, nil
}

// releaseHeading is a Keep a Changelog release heading: "## [0.1.0] - ...".
var releaseHeading = regexp.MustCompile(`(?m)^## \[v?([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)\]`)

// releaseVersion returns the version of the newest release in the commit's
// CHANGELOG.md: its first release heading, "Unreleased" aside.
func (c *commit) releaseVersion() (string, error) {
	data, err := c.file("CHANGELOG.md")
	if err != nil {
		return "", err
	}
	m := releaseHeading.FindSubmatch(data)
	if m == nil {
		return "", errors.New("CHANGELOG.md has no release heading such as \"## [0.1.0] - 2026-01-31\"")
	}
	return "v" + string(m[1]), nil
}

// checkVersion reports whether v can be the version of every module.
func checkVersion(v string, mods []mod) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("version %q is not a canonical semantic version such as v0.1.0", v)
	}
	for _, m := range mods {
		if err := module.Check(m.path, v); err != nil {
			return err
		}
	}
	return nil
}

// zipFiles returns the commit's files of module m in the form
// golang.org/x/mod/zip takes, with names relative to the module's folder.
// zip.Create then leaves out what a module zip must not hold (nested
// modules, vendored packages, symbolic links). A nested module without a
// LICENSE gets the root's, as the go command does when it serves one from
// git.
func (c *commit) zipFiles(m mod) []modzip.File {
	prefix := ""
	if m.dir != "." {
		prefix = m.dir + "/"
	}
	var files []modzip.File
	license := false
	for _, f := range c.files {
		if name, ok := strings.CutPrefix(f.Name, prefix); ok {
			files = append(files, zipFile{name: name, f: f})
			license = license || name == "LICENSE"
		}
	}
	if !license && prefix != "" {
		for _, f := range c.files {
			if f.Name == "LICENSE" {
				files = append(files, zipFile{name: "LICENSE", f: f})
			}
		}
	}
	return files
}

// zipFile is one file of a commit's archive, as golang.org/x/mod/zip reads it.
type zipFile struct {
	name string
	f    *zip.File
}

func (z zipFile) Path() string                 { return z.name }
func (z zipFile) Lstat() (fs.FileInfo, error)  { return z.f.FileInfo(), nil }
func (z zipFile) Open() (io.ReadCloser, error) { return z.f.Open() }

// git runs git in dir and returns its output without the final newline.
func git(dir string, args ...string) (string, error) {
	out, err := gitBytes(dir, args...)
	return strings.TrimSpace(string(out)), err
}

func gitBytes(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
