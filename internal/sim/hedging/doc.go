// Package hedging is retrysim's hedging study in virtual time: calls of
// retry.Do with Policy.HedgeDelay, modelled by the core's hedging rules
// (model.go, checked attempt by attempt against retry.Do in a synctest
// bubble), against a server whose attempts have a heavy tail, a worker
// pool, a bounded queue that sheds with 503, and cancellations that reach
// it a little after the client sends them (server.go). The study
// (study.go) compares no hedging, hedging at a fixed delay and at an
// adaptive.Hedge's, with and without a Budget, and retrying on a timeout,
// at half the server's capacity and above it, in the spirit of Dean and
// Barroso's "The Tail at Scale".
//
// Runs are exact and seeded: the same Config gives the same Result on any
// machine. The library's own parts make the decisions: retry.Next after
// each failure, the Policy's Budget and Hedge, given the virtual time.
package hedging
