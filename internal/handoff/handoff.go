// Package handoff holds what package retryhttp hands to package retry
// through a value neither owns: a context key on the request of a response
// that retryhttp returned after giving up.
package handoff

// GaveUp is the context key, on the Request of a response that retryhttp
// returned because its retry loop stopped on it, whose value is that loop's
// *retry.Error. retry.CheckResponse reads it, so that an outer loop does not
// retry a response whose retries were already spent.
type GaveUp struct{}
