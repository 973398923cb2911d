package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What go test -json printed for a package with a test and its subtest
// passing, a test skipping and one failing, and for a package that does
// not build; and a line from the go command that is not JSON.
const sample = `{"Action":"start","Package":"tj"}
{"Action":"run","Package":"tj","Test":"TestA"}
{"Action":"output","Package":"tj","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"run","Package":"tj","Test":"TestA/sub"}
{"Action":"output","Package":"tj","Test":"TestA/sub","Output":"--- PASS: TestA/sub (0.00s)\n"}
{"Action":"pass","Package":"tj","Test":"TestA/sub","Elapsed":0}
{"Action":"output","Package":"tj","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"tj","Test":"TestA","Elapsed":0}
{"Action":"run","Package":"tj","Test":"TestSkip"}
{"Action":"output","Package":"tj","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"tj","Test":"TestSkip","Output":"    a_test.go:4: hello\n"}
{"Action":"output","Package":"tj","Test":"TestSkip","Output":"    a_test.go:4: RETRY_X is not set: run it so\n"}
{"Action":"output","Package":"tj","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"tj","Test":"TestSkip","Elapsed":0}
{"Action":"run","Package":"tj","Test":"TestFail"}
{"Action":"output","Package":"tj","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"tj","Test":"TestFail","Output":"    a_test.go:5: boom\n"}
{"Action":"output","Package":"tj","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"tj","Test":"TestFail","Elapsed":0}
{"Action":"output","Package":"tj","Output":"FAIL\n"}
{"Action":"output","Package":"tj","Output":"FAIL\ttj\t0.004s\n"}
{"Action":"fail","Package":"tj","Elapsed":0.005}
{"ImportPath":"tj/bad [tj/bad.test]","Action":"build-output","Output":"bad/bad.go:1:25: undefined: undefined\n"}
{"ImportPath":"tj/bad [tj/bad.test]","Action":"build-fail"}
{"Action":"start","Package":"tj/bad"}
{"Action":"output","Package":"tj/bad","Output":"FAIL\ttj/bad [build failed]\n"}
{"Action":"fail","Package":"tj/bad","Elapsed":0,"FailedBuild":"tj/bad [tj/bad.test]"}
{"Action":"output","Package":"tj/none","Output":"?   \ttj/none\t[no test files]\n"}
{"Action":"skip","Package":"tj/none","Elapsed":0}
FAIL
go: some error of the go command
`

func TestFilter(t *testing.T) {
	var out bytes.Buffer
	r, err := filter(strings.NewReader(sample), &out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed != 2 || r.Failed != 2 || r.Skipped != 1 {
		t.Errorf("counts = %d passed, %d failed, %d skipped; want 2, 2 (a test, a build), 1", r.Passed, r.Failed, r.Skipped)
	}
	if len(r.Skips) != 1 || r.Skips[0] != (skip{"tj.TestSkip", "RETRY_X is not set: run it so"}) {
		t.Errorf("skips = %+v, want tj.TestSkip with its reason", r.Skips)
	}
	want := "=== RUN   TestFail\n    a_test.go:5: boom\n--- FAIL: TestFail (0.00s)\nFAIL\ttj\t0.004s\n" +
		"bad/bad.go:1:25: undefined: undefined\nFAIL\ttj/bad [build failed]\n?   \ttj/none\t[no test files]\n" +
		"FAIL\ngo: some error of the go command\n"
	if got := out.String(); got != want {
		t.Errorf("printed:\n%s\nwant:\n%s", got, want)
	}
}

func TestReport(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	for _, r := range []result{
		{Module: ".", Passed: 10, Seconds: 3},
		{Module: "retrygrpc", Passed: 5, Failed: 1, Skipped: 1, Skips: []skip{{"p.TestPG", "RETRY_POSTGRES_URL is not set"}}, Seconds: 1.4},
	} {
		if err := appendResult(record, r); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	failed, err := printReport(&out, record)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("report says nothing failed")
	}
	want := ".          10 passed,  0 failed,  0 skipped  (3s)\n" +
		"retrygrpc   5 passed,  1 failed,  1 skipped  (1s)\n" +
		"skipped:\n  p.TestPG: RETRY_POSTGRES_URL is not set\n" +
		"total: 15 passed, 1 failed, 1 skipped\n"
	if got := out.String(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	if err := os.WriteFile(record, []byte(`{"Module":".","Passed":3}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if failed, err := printReport(&out, record); err != nil || failed {
		t.Errorf("report of a passing module: failed %v, %v", failed, err)
	}
}
