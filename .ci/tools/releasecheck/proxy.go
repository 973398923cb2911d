package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// proxy is a module proxy on disk, in the layout GOPROXY=file:// reads:
// PATH/@v/list, PATH/@v/VERSION.info, .mod and .zip, PATH escaped as
// module.EscapePath does.
type proxy string

// url is the GOPROXY value that reaches the proxy.
func (p proxy) url() string { return "file://" + filepath.ToSlash(string(p)) }

func (p proxy) dir(modPath string) (string, error) {
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(string(p), filepath.FromSlash(esc), "@v")
	return dir, os.MkdirAll(dir, 0o755)
}

// publish adds module m of commit c at version v, as a tag on the commit
// would publish it: its go.mod as committed (replace directives included:
// they apply only where the module is the main one), the zip made from the
// commit's files, and an .info with the commit's time.
func (p proxy) publish(c *commit, m mod, v string) error {
	dir, err := p.dir(m.path)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, c.when.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, v+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, v+".mod"), m.goMod, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "list"), []byte(v+"\n"), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, v+".zip"))
	if err != nil {
		return err
	}
	if err := modzip.Create(f, module.Version{Path: m.path, Version: v}, c.zipFiles(m)); err != nil {
		f.Close()
		return fmt.Errorf("zip of %s@%s: %w", m.path, v, err)
	}
	return f.Close()
}

// copyCache copies into the proxy the third-party modules of a module
// cache's download tree (GOMODCACHE/cache/download, itself in the proxy
// layout), all of them, as hard links where it can: cheaper than working
// out which ones a build needs, and a build that needs one the cache lacks
// still fails. It leaves out ours, whatever versions of them the cache
// holds (a real release's, say), and the checksum database's files, and
// returns how many module versions it copied.
func (p proxy) copyCache(cache string, ours []mod) (int, error) {
	skip := map[string]bool{filepath.Join(cache, "sumdb"): true}
	for _, m := range ours {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return 0, err
		}
		skip[filepath.Join(cache, filepath.FromSlash(esc))] = true
	}
	n := 0
	err := filepath.WalkDir(cache, func(name string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && skip[name]:
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		switch filepath.Ext(name) {
		case ".mod":
			n++
		case ".info", ".zip":
		default:
			if d.Name() != "list" {
				return nil // locks, .ziphash: the cache's own bookkeeping
			}
		}
		rel, err := filepath.Rel(cache, name)
		if err != nil {
			return err
		}
		to := filepath.Join(string(p), rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return link(name, to)
	})
	return n, err
}

// link makes to a hard link of from, or a copy where a link cannot be made.
// The cache's files are never written to, so sharing them is safe.
func link(from, to string) error {
	if _, err := os.Stat(to); err == nil {
		return nil
	}
	if err := os.Link(from, to); err == nil {
		return nil
	} else if errors.Is(err, os.ErrNotExist) {
		return err
	}
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
