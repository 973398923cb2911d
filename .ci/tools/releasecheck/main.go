// Command releasecheck installs every published module of the repository as
// a user will get it once the release is tagged, and fails if one cannot be.
//
// From one commit of the repository it builds a throwaway module proxy on
// disk (the layout GOPROXY=file:// reads) holding each published module at
// the version the release would tag, zipped by golang.org/x/mod/zip from the
// commit's files, with the third-party modules they need copied from the
// local module cache. Then, in a fresh module with no replace directive and
// an empty module cache, it runs go get for each published module at that
// version, builds a small program that uses each, and runs it. Those go
// commands see that proxy and nothing else: no fallback to another proxy or
// to version control, no checksum database, and, where the machine allows it,
// no network at all (they run in a network namespace of their own). So a
// nested module that requires a version of the root that is not the one
// being released, or a third-party module the proxy lacks, fails the check
// instead of being fetched from somewhere else.
//
// Usage, from this module's folder (.ci/release runs it so):
//
//	go run ./releasecheck -repo ../.. [-rev REV] [-version vX.Y.Z] [-keep]
//	go run ./releasecheck -repo ../.. -list [-version vX.Y.Z]
//
// The commit is HEAD together with any uncommitted change to tracked files
// (what git stash create records), so that a clean clone checks exactly
// HEAD; -rev names another. The version is that of the newest release
// heading in the commit's CHANGELOG.md; -version overrides it. The published
// modules are those of every go.mod in the commit except under benchmarks/
// and examples/ (never published), testdata, and folders whose name starts
// with "." or "_" (the CI tooling); a command's own module, such as
// retryriver/cmd/outage, is published too. The program that uses a module is
// testdata/consumers/NAME/main.go, NAME being the last element of the
// module's path; a module without one (a new one) gets a program that
// imports each of its packages, and the check says so; a module of commands
// only is installed as a tool (go get -tool), built, and run with -h.
//
// With -list it checks nothing: it prints the published modules, one a
// line, as the module path, a tab, its folder, a tab and the tag of the
// version, the root first. RELEASING.md's steps read the list from it, so
// that the modules are listed in one place.
package main

import (
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"os"
)

//go:embed testdata/consumers
var consumers embed.FS

func main() {
	c := config{out: os.Stdout}
	flag.StringVar(&c.repo, "repo", ".", "a folder of the repository")
	flag.StringVar(&c.rev, "rev", "", "the commit to release (default: HEAD with uncommitted changes to tracked files)")
	flag.StringVar(&c.version, "version", "", "the version to tag (default: the newest release in CHANGELOG.md)")
	flag.BoolVar(&c.keep, "keep", false, "keep the proxy and the consumer module, and say where they are")
	list := flag.Bool("list", false, "print the published modules (path, folder, tag) and check nothing")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "releasecheck: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	sub, err := fs.Sub(consumers, "testdata/consumers")
	if err != nil {
		panic(err) // the embedded folder is there: go:embed checked it
	}
	c.consumers = sub
	if *list {
		if err := printList(c); err != nil {
			fmt.Fprintln(os.Stderr, "releasecheck:", err)
			os.Exit(1)
		}
		return
	}
	if err := check(c); err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck: FAILED:", err)
		os.Exit(1)
	}
}
