// Package benchmarks measures github.com/seed93a044d1/retry side by side with
// the Go retry libraries people compare it with, running the same scenarios
// for each. It lives in a nested module so that the peers never enter a
// user's go.sum. All the code is in the _test.go files; see README.md for how
// to run it and the latest results.
package benchmarks
