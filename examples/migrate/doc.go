// Package migrate holds the translations of docs/migrating.md as examples
// that compile and run: the common usages of hashicorp/go-retryablehttp,
// cenkalti/backoff, avast/retry-go and sethvargo/go-retry, written with
// retry and retryhttp. The waits are nanoseconds, or printed instead of
// slept, so that the examples run at once; the page gives the real values.
package migrate
