package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// config is what the check is asked to do.
type config struct {
	repo      string    // a folder of the repository
	rev       string    // the commit; "" = HEAD with uncommitted changes to tracked files
	version   string    // the version to tag; "" = the newest release in CHANGELOG.md
	keep      bool      // keep the work folder
	consumers fs.FS     // NAME/main.go: the program that uses module NAME
	out       io.Writer // the report
}

// check runs the release check; nil means every published module installed
// from the throwaway proxy and its program ran.
func check(c config) (err error) {
	start := time.Now()
	say := func(format string, args ...any) { fmt.Fprintf(c.out, "release: "+format+"\n", args...) }

	repo, version, from, mods, err := release(c)
	if err != nil {
		return err
	}
	say("commit %.12s (%s), version %s (from %s)", repo.rev, repo.what, version, from)
	for _, m := range mods {
		say("  %s: tag %s", m.path, m.tag(version))
	}

	work, err := os.MkdirTemp("", "releasecheck-")
	if err != nil {
		return err
	}
	if c.keep {
		// What RELEASING.md's "Trying a release before it is tagged" says:
		// the proxy's versions are this commit, not the release, so they go
		// into a module cache of their own, never the user's.
		defer say("kept %s (proxy/, consumer/); to install from the proxy in a module of yours, with a module cache of its own:\n"+
			"  GOPROXY=%s GOSUMDB=off GOFLAGS=-mod=mod GOMODCACHE=$(mktemp -d) go get %s@%s",
			work, proxy(filepath.Join(work, "proxy")).url(), mods[0].path, version)
	} else {
		defer os.RemoveAll(work)
	}
	px := proxy(filepath.Join(work, "proxy"))
	for _, m := range mods {
		if err := px.publish(repo, m, version); err != nil {
			return err
		}
	}

	// The go command that a module with the highest go line of ours runs
	// (GOTOOLCHAIN may switch to a newer one for it): found now, while it
	// may still be downloaded, and then pinned, since the offline part
	// could not fetch it.
	goVer := "1.21"
	for _, m := range mods {
		if m.goVer != "" && semver.Compare("v"+m.goVer, "v"+goVer) > 0 {
			goVer = m.goVer
		}
	}
	gocmd, err := toolchain(filepath.Join(work, "toolchain"), goVer)
	if err != nil {
		return err
	}

	// Warm the local module cache: the same installs, in modules whose
	// go.mod replaces each of ours by the commit's folder, with the usual
	// GOPROXY and module cache, leave in that cache what a user's build
	// fetches, every intermediate go get included. Where the cache is warm
	// (after the tests of every module), nothing is fetched.
	tree := filepath.Join(work, "tree")
	if err := repo.extract(tree); err != nil {
		return err
	}
	userCache, err := gocmd.output(work, "env", "GOMODCACHE")
	if err != nil {
		return err
	}
	warm := gocmd.with("GOFLAGS=-mod=mod", "GOWORK=off")
	programs, err := writePrograms(c.consumers, mods, tree, warm)
	if err != nil {
		return err
	}
	for _, p := range programs {
		if p.generated {
			say("  %s: no program in testdata/consumers/%s/main.go: its packages are built, not used", p.mod.path, p.mod.name())
		}
	}
	// A user installs one module alone, or several: each module is
	// installed in a fresh module of its own, then all of them together.
	sets := make([][]program, 0, len(programs)+1)
	for _, p := range programs {
		sets = append(sets, []program{p})
	}
	sets = append(sets, programs)
	name := func(i int) string {
		if i == len(programs) {
			return "all"
		}
		return programs[i].mod.name()
	}

	for i, set := range sets {
		if err := install(filepath.Join(work, "warm", name(i)), warm, set, version, mods, tree); err != nil {
			return err
		}
	}
	others, err := px.copyCache(filepath.Join(userCache, "cache", "download"), mods)
	if err != nil {
		return err
	}
	say("proxy: %d modules of ours, %d third-party module versions copied from the module cache, in %s", len(mods), others, px)

	// Install as a user would, with nothing but the proxy.
	offline := gocmd.with(
		"GOPROXY="+px.url(), "GONOPROXY=", "GOPRIVATE=", "GONOSUMDB=", "GOSUMDB=off", "GOINSECURE=",
		"GOVCS=*:off", "GOFLAGS=-mod=mod", "GOWORK=off",
		"GOMODCACHE="+filepath.Join(work, "modcache"))
	defer offline.run(work, "clean", "-modcache")
	if offline.netns = networkNamespace(); offline.netns == nil {
		say("no network namespace can be made here: offline by GOPROXY alone")
	}
	for i, set := range sets {
		consumer := filepath.Join(work, "consumer", name(i))
		if err := install(consumer, offline, set, version, nil, ""); err != nil {
			return err
		}
		if data, err := os.ReadFile(filepath.Join(consumer, "go.mod")); err != nil {
			return err
		} else if bytes.Contains(data, []byte("replace")) {
			return errors.New("the consumer's go.mod has a replace directive")
		}
		bin := filepath.Join(work, "bin", name(i))
		// -trimpath keeps the build cache's entries independent of where
		// the fresh module cache is, so a second run reuses the first's work.
		pkgs := []string{"./..."}
		for _, p := range set {
			pkgs = append(pkgs, p.commands...)
		}
		if len(set) == 1 && set[0].commands != nil {
			pkgs = set[0].commands // the consumer has no package of its own
		}
		if err := offline.run(consumer, append([]string{"build", "-trimpath", "-o", bin + string(filepath.Separator)}, pkgs...)...); err != nil {
			return err
		}
		if len(set) > 1 {
			say("  all %d modules in one module: go get, go mod tidy, go build passed", len(set))
			continue
		}
		p := set[0]
		cmd := exec.Command(filepath.Join(bin, p.mod.name()))
		if p.commands != nil {
			// A command's own flags are its business; -h only shows that
			// it was built whole and starts.
			cmd = exec.Command(filepath.Join(bin, path.Base(p.commands[0])), "-h")
		}
		cmd.Dir = consumer
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("the program that uses %s: %w\n%s", p.mod.path, err, out)
		}
		if p.commands != nil {
			say("  %s alone: go get -tool, go mod tidy, go build passed; %s -h ran", p.mod.name(), path.Base(p.commands[0]))
			continue
		}
		say("  %s alone: go get, go mod tidy, go build passed; it ran: %s", p.mod.name(), strings.TrimSpace(string(out)))
	}
	say("passed in %.1fs: every published module installed offline from the proxy, in modules with no replace", time.Since(start).Seconds())
	return nil
}

// release finds what c asks to release: the commit, the version and where
// it was read, and the published modules, the root first.
func release(c config) (repo *commit, version, from string, mods []mod, err error) {
	if repo, err = openCommit(c.repo, c.rev); err != nil {
		return nil, "", "", nil, err
	}
	version, from = c.version, "-version"
	if version == "" {
		from = "CHANGELOG.md"
		if version, err = repo.releaseVersion(); err != nil {
			return nil, "", "", nil, err
		}
	}
	if mods, err = repo.published(); err != nil {
		return nil, "", "", nil, err
	}
	if err := checkVersion(version, mods); err != nil {
		return nil, "", "", nil, err
	}
	return repo, version, from, mods, nil
}

// printList writes the published modules to c.out, one a line: path,
// folder and tag, separated by tabs, the root first.
func printList(c config) error {
	_, version, _, mods, err := release(c)
	if err != nil {
		return err
	}
	for _, m := range mods {
		fmt.Fprintf(c.out, "%s\t%s\t%s\n", m.path, m.dir, m.tag(version))
	}
	return nil
}

// program is the main package that uses one published module.
type program struct {
	mod       mod
	source    []byte
	generated bool     // made here: it imports the module's packages, nothing more
	commands  []string // a module of commands only: their import paths, installed as tools
}

func (p program) write(dir string) error {
	if p.commands != nil {
		return nil // the module's own commands are the programs
	}
	dir = filepath.Join(dir, p.mod.name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "main.go"), p.source, 0o644)
}

// writePrograms returns the program for each module: its own from
// consumers, or one that imports every package of the module a user can
// import (listed from the commit's files).
func writePrograms(consumers fs.FS, mods []mod, tree string, gocmd goCommand) ([]program, error) {
	var programs []program
	for _, m := range mods {
		src, err := fs.ReadFile(consumers, m.name()+"/main.go")
		if err == nil {
			programs = append(programs, program{mod: m, source: src})
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		list, err := gocmd.output(filepath.Join(tree, m.dir), "list", "-f", `{{if ne .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		b.WriteString("// Generated by releasecheck: a module without a program of its own.\npackage main\n\nimport (\n")
		n := 0
		for _, pkg := range strings.Fields(list) {
			if pkg == m.path+"/internal" || strings.HasPrefix(pkg, m.path+"/internal/") || strings.Contains(pkg, "/internal/") {
				continue
			}
			fmt.Fprintf(&b, "\t_ %q\n", pkg)
			n++
		}
		if n == 0 {
			// A module of commands: a user installs them, so the check
			// does too, as tools of the consumer module.
			mains, err := gocmd.output(filepath.Join(tree, m.dir), "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
			if err != nil {
				return nil, err
			}
			if len(strings.Fields(mains)) == 0 {
				return nil, fmt.Errorf("%s has no package a user can import and no command", m.path)
			}
			programs = append(programs, program{mod: m, commands: strings.Fields(mains)})
			continue
		}
		fmt.Fprintf(&b, ")\n\nfunc main() { println(\"imported %d packages\") }\n", n)
		programs = append(programs, program{mod: m, source: []byte(b.String()), generated: true})
	}
	return programs, nil
}

// install makes, in folder dir, a module that uses each of ours through its
// program, as a user would: go mod init, go get of each module at version,
// go mod tidy. With tree set, every module of ours (mods) is replaced by
// its folder there, whether the programs need it or not, so that none is
// ever fetched.
func install(dir string, gocmd goCommand, programs []program, version string, mods []mod, tree string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := gocmd.run(dir, "mod", "init", "example.com/consumer"); err != nil {
		return err
	}
	for _, m := range mods {
		if tree != "" {
			if err := gocmd.run(dir, "mod", "edit", "-replace", m.path+"="+filepath.Join(tree, m.dir)); err != nil {
				return err
			}
		}
	}
	for _, p := range programs {
		if err := p.write(dir); err != nil {
			return err
		}
	}
	for _, p := range programs {
		get := []string{"get", p.mod.path + "@" + version}
		if p.commands != nil {
			get = []string{"get", "-tool"}
			for _, c := range p.commands {
				get = append(get, c+"@"+version)
			}
		}
		if err := gocmd.run(dir, get...); err != nil {
			return fmt.Errorf("%w\nhint: each published module must require the others at the version being released, %s "+
				"(see RELEASING.md)", err, version)
		}
	}
	return gocmd.run(dir, "mod", "tidy")
}
