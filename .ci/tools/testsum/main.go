// Command testsum turns the output of go test -json into what a person
// reads, and counts what ran.
//
// As a filter, it reads one module's go test -json from standard input and
// writes what go test prints without -json (the package lines, and the
// whole output of each failed test), then appends that module's counts to a
// record file:
//
//	go test -json ./... 2>&1 | testsum -module retrygrpc -record FILE
//
// With -report it reads the record file and prints one line per module and
// a total, each "N passed, N failed, N skipped", then the tests that were
// skipped, each with the reason it gave; it exits with status 1 if anything
// failed:
//
//	testsum -report FILE
//
// Subtests count as tests, as go test's -v output lists them. A package that
// fails with no failed test (it did not build, its TestMain exited, it timed
// out between tests) counts as one failure. Lines that are not JSON (the go
// command's own errors) are printed as they are.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	module := flag.String("module", ".", "filter: the module whose tests are read")
	record := flag.String("record", "", "filter: the file that the module's counts are appended to")
	report := flag.String("report", "", "print the counts of the modules recorded in this file, and a total")
	flag.Parse()
	var err error
	switch {
	case *report != "":
		var failed bool
		if failed, err = printReport(os.Stdout, *report); err == nil && failed {
			os.Exit(1)
		}
	case *record != "":
		start := time.Now()
		var r result
		if r, err = filter(os.Stdin, os.Stdout); err == nil {
			r.Module, r.Seconds = *module, time.Since(start).Seconds()
			err = appendResult(*record, r)
		}
	default:
		err = errors.New("give -record FILE (a filter) or -report FILE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
}

// event is one line of go test -json (cmd/test2json's TestEvent), with the
// fields of the build's output (Go 1.24 and later).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// skip is a test that was skipped, and why.
type skip struct {
	Test   string // package and test name
	Reason string // the last line it logged before skipping
}

// result is what one module's tests did.
type result struct {
	Module                  string
	Passed, Failed, Skipped int
	Skips                   []skip
	Seconds                 float64
}

// filter reads go test -json from r, writes what a person reads to w, and
// returns the counts.
func filter(r io.Reader, w io.Writer) (result, error) {
	var res result
	type key struct{ pkg, test string }
	logs := map[key][]string{}      // the output of each test still running
	testFailed := map[string]bool{} // packages with a failed test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && e.Action == "output":
			// The package's own lines: "ok", "FAIL", "?", and what is
			// printed outside any test.
			if e.Output != "PASS\n" && e.Output != "FAIL\n" {
				fmt.Fprint(w, e.Output)
			}
		case e.Test == "" && e.Action == "fail":
			if !testFailed[e.Package] {
				res.Failed++
			}
		case e.Test == "":
		case e.Action == "output":
			logs[k] = append(logs[k], e.Output)
		case e.Action == "pass":
			res.Passed++
			delete(logs, k)
		case e.Action == "skip":
			res.Skipped++
			res.Skips = append(res.Skips, skip{e.Package + "." + e.Test, reason(logs[k])})
			delete(logs, k)
		case e.Action == "fail":
			res.Failed++
			testFailed[e.Package] = true
			fmt.Fprint(w, strings.Join(logs[k], ""))
			delete(logs, k)
		}
	}
	return res, sc.Err()
}

// reason returns the last line a skipped test logged: its t.Skip message.
func reason(log []string) string {
	for i := len(log) - 1; i >= 0; i-- {
		l := strings.TrimSpace(log[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		// Drop the "file_test.go:12: " that testing puts before a message.
		if _, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(l[:len(l)-len(msg)], ".go:") {
			l = msg
		}
		return l
	}
	return ""
}

func appendResult(name string, r result) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printReport prints the counts of every module recorded in file name and
// their total, and reports whether any test failed.
func printReport(w io.Writer, name string) (failed bool, err error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return false, err
	}
	var results []result
	width := len("module")
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
		width = max(width, len(r.Module))
	}
	var total result
	for _, r := range results {
		total.Passed += r.Passed
		total.Failed += r.Failed
		total.Skipped += r.Skipped
		total.Skips = append(total.Skips, r.Skips...)
	}
	// Counts right-aligned, so that the columns line up.
	digits := len(fmt.Sprint(max(total.Passed, total.Failed, total.Skipped)))
	for _, r := range results {
		fmt.Fprintf(w, "%-*s  %*d passed, %*d failed, %*d skipped  (%.0fs)\n", width, r.Module,
			digits, r.Passed, digits, r.Failed, digits, r.Skipped, r.Seconds)
	}
	if len(total.Skips) > 0 {
		fmt.Fprintln(w, "skipped:")
		for _, s := range total.Skips {
			fmt.Fprintf(w, "  %s: %s\n", s.Test, s.Reason)
		}
	}
	fmt.Fprintf(w, "total: %s\n", counts(total))
	return total.Failed > 0, nil
}

func counts(r result) string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", r.Passed, r.Failed, r.Skipped)
}
