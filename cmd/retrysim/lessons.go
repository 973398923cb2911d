package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/seed93a044d1/retry/internal/sim"
)

// drillLessons returns, for each variant of the drill, the one thing it
// shows, in one sentence built from the run's own numbers, so that it stays
// true for any -jobs or -seed: a claim that depends on which way the
// numbers went is made only when they went that way. A variant whose
// comparison is missing from results gets no sentence.
func drillLessons(results []sim.DrillResult) map[string]string {
	by := map[string]*sim.DrillResult{}
	for i := range results {
		by[results[i].Name] = &results[i]
	}
	out := map[string]string{}
	given, noJitter, noLimiter, neither, budget, told := by[sim.DrillNames.AsGiven], by[sim.DrillNames.NoJitter], by[sim.DrillNames.NoLimiter], by[sim.DrillNames.NoJitterNoLimiter], by[sim.DrillNames.Budget10], by[sim.DrillNames.ServerDelay]
	learned, river := by[sim.DrillNames.Adaptive], by[sim.DrillNames.River]
	if given != nil && noLimiter != nil {
		out[sim.DrillNames.AsGiven] = limiterLesson(given, noLimiter)
	}
	if noJitter != nil && given != nil && neither != nil {
		out[sim.DrillNames.NoJitter] = noJitterLesson(noJitter, given, neither)
	}
	if noLimiter != nil && neither != nil {
		out[sim.DrillNames.NoLimiter] = jitterLesson(noLimiter, neither)
	}
	if neither != nil {
		out[sim.DrillNames.NoJitterNoLimiter] = lockstepLesson(neither)
	}
	if budget != nil && given != nil {
		out[sim.DrillNames.Budget10] = budgetLesson(budget, given)
	}
	if told != nil && noLimiter != nil {
		out[sim.DrillNames.ServerDelay] = serverDelayLesson(told, noLimiter)
	}
	if learned != nil && given != nil && noLimiter != nil && river != nil {
		out[sim.DrillNames.Adaptive] = adaptiveLesson(learned, given, noLimiter, river)
	}
	if river != nil && given != nil {
		out[sim.DrillNames.River] = riverLesson(river, given)
	}
	return out
}

// adaptiveLesson: what a limiter that learns the rate does against one
// that is told it, and against none.
func adaptiveLesson(learned, given, noLimiter, river *sim.DrillResult) string {
	s, g := learned.Summary, given.Summary
	outage := fmt.Sprintf("%s meet the silent outage (%s with no limiter, %s as given)",
		plural(learned.InOutage(), "attempt"), count(noLimiter.InOutage()), count(given.InOutage()))
	if learned.InOutage() >= noLimiter.InOutage() {
		outage = fmt.Sprintf("the silent outage sends none, so %s meet it as with no limiter (%s as given)",
			plural(learned.InOutage(), "attempt"), count(given.InOutage()))
	}
	dead := "every job is delivered"
	if s.DeadLettered > 0 {
		dead = fmt.Sprintf("%s dead-lettered (%s as given)", isAre(s.DeadLettered, "job"), count(g.DeadLettered))
	}
	paced := "it meets no 429, so it never paces"
	if peak, ok := peakAfterFirst(learned, sim.Throttled); ok {
		paced = fmt.Sprintf("from the second after its first 429 it sends at most %s a second for a capacity of %d", plural(peak, "attempt"), sim.DrillCapacity)
	}
	drain := fmt.Sprintf("drains in %s (%s as given)", secs(s.Drain), secs(g.Drain))
	if s.Drain < g.Drain && s.DeadLettered > g.DeadLettered {
		drain += ", sooner for the jobs it gave up"
	}
	return fmt.Sprintf("Given no rate, it paces only once 429s have taught it one: %s and %s; %s, meets %s in all (%s with no limiter, %s under River's default) and %s.",
		outage, dead, paced, plural(learned.Count(sim.Throttled), "429"), count(noLimiter.Count(sim.Throttled)), count(river.Count(sim.Throttled)), drain)
}

// peakAfterFirst returns the most attempts in one clock second from the
// second after the one of the first attempt with result res, and whether
// there was one.
func peakAfterFirst(r *sim.DrillResult, res sim.AttemptResult) (int, bool) {
	first := r.Times(res)
	if len(first) == 0 {
		return 0, false
	}
	from := int(slices.Min(first)/sim.RateBin) + 1
	peak := 0
	for k, n := range sim.PerSecond(r.Times(), 0) {
		if k >= from {
			peak = max(peak, n)
		}
	}
	return peak, true
}

// riverLesson: what a job queue's default retry policy does to the
// provider.
func riverLesson(river, given *sim.DrillResult) string {
	s, g := river.Summary, given.Summary
	delivered := fmt.Sprintf("delivers %s", plural(s.Delivered, "job"))
	if s.Delivered == s.Jobs {
		delivered = "delivers every job"
	}
	return fmt.Sprintf("River's default policy, with no limiter and deaf to Retry-After, %s (%s as given) but sends %s (%s as given), %s answered 429 (%s as given) and up to %s a second once the provider is back, and its attempt^4 waits stretch the drain to %s (%s as given).",
		delivered, count(g.Delivered), plural(s.Attempts, "attempt"), count(g.Attempts), count(river.Count(sim.Throttled)), count(given.Count(sim.Throttled)),
		count(s.PeakUp), secs(s.Drain), secs(g.Drain))
}

// limiterLesson: what the limiter does, with jitter.
func limiterLesson(given, noLimiter *sim.DrillResult) string {
	lead := "The limiter caps the provider's load at"
	if given.Summary.PeakPerSecond >= noLimiter.Summary.PeakPerSecond {
		lead = "With the limiter, the provider gets at most" // too few jobs for it to bind
	}
	return fmt.Sprintf("%s %s a second (%s without it): %s spent in the outage (%s without it) and %s delivered (%s without it).",
		lead, plural(given.Summary.PeakPerSecond, "attempt"), count(noLimiter.Summary.PeakPerSecond),
		isAre(given.InOutage(), "attempt"), count(noLimiter.InOutage()),
		isAre(given.Summary.Delivered, "job"), count(noLimiter.Summary.Delivered))
}

// noJitterLesson: what the limiter does without jitter, and that behind it
// jitter changes little.
func noJitterLesson(noJitter, given, neither *sim.DrillResult) string {
	s, g := noJitter.Summary, given.Summary
	if near(s.Delivered, g.Delivered, 0.01*float64(s.Jobs)) && near(s.PeakPerSecond, g.PeakPerSecond, 0.05*float64(g.PeakPerSecond)) {
		return fmt.Sprintf("Without jitter the limiter works just as well: %s delivered (%s with neither, %s with jitter) at no more than %s a second (%s with neither), because its queue spaces the attempts whatever the backoff.",
			plural(s.Delivered, "job"), count(neither.Summary.Delivered), count(g.Delivered), plural(s.PeakPerSecond, "attempt"), count(neither.Summary.PeakPerSecond))
	}
	return fmt.Sprintf("Without jitter, the limiter delivers %s (%s with neither, %s with jitter) at no more than %s a second (%s with neither, %s with jitter).",
		plural(s.Delivered, "job"), count(neither.Summary.Delivered), count(g.Delivered),
		plural(s.PeakPerSecond, "attempt"), count(neither.Summary.PeakPerSecond), count(g.PeakPerSecond))
}

// jitterLesson: what jitter does without a limiter.
func jitterLesson(noLimiter, neither *sim.DrillResult) string {
	s, n := noLimiter.Summary, neither.Summary
	lead := "Without a limiter, with jitter"
	if s.PeakUp < n.PeakUp {
		lead = "Without a limiter, jitter spreads each wave of retries over its backoff window"
	}
	return fmt.Sprintf("%s: once back, the provider gets at most %s a second (%s without jitter), and %s delivered (%s without jitter).",
		lead, plural(s.PeakUp, "attempt"), count(n.PeakUp), isAre(s.Delivered, "job"), count(n.Delivered))
}

// lockstepLesson: the synchronised waves with neither jitter nor limiter.
func lockstepLesson(neither *sim.DrillResult) string {
	s := neither.Summary
	ws := waves(neither.Times(), max(2, s.Jobs/10))
	if len(ws) == 0 {
		return fmt.Sprintf("With neither jitter nor limiter, the provider gets at most %s a second, and %s delivered.",
			plural(s.PeakPerSecond, "attempt"), isAre(s.Delivered, "job"))
	}
	smallest, largest, down := ws[0].size, ws[0].size, 0
	for _, w := range ws {
		smallest, largest = min(smallest, w.size), max(largest, w.size)
		if w.at < neither.Outage {
			down++
		}
	}
	size := plural(largest, "attempt")
	if smallest != largest {
		size = count(smallest) + " to " + plural(largest, "attempt")
	}
	inOutage := fmt.Sprintf(", %d of them in the outage", down)
	switch down {
	case 0:
		inOutage = ""
	case len(ws):
		inOutage = ", all in the outage"
	}
	return fmt.Sprintf("With neither, the jobs move in lockstep: %s of %s, each at a single instant%s; %s delivered.",
		plural(len(ws), "wave"), size, inOutage, isAre(s.Delivered, "job"))
}

// budgetLesson: what the budget costs and what it saves.
func budgetLesson(budget, given *sim.DrillResult) string {
	b, g := budget.Summary, given.Summary
	refused, first := budgetRefusals(*budget)
	if refused == 0 {
		return fmt.Sprintf("The budget refused no retry: %s (%s as given) and %s delivered (%s as given).",
			plural(b.Attempts, "attempt"), count(g.Attempts), plural(b.Delivered, "job"), count(g.Delivered))
	}
	when := ""
	if first >= 0 {
		when = fmt.Sprintf(", the first at %.1f s", first.Seconds())
		if first < budget.Outage {
			when += ", while the provider was down"
		}
	}
	var saved string
	switch d := g.Attempts - b.Attempts; {
	case d > 0:
		saved = fmt.Sprintf("that saved %s (%.0f%% of as given's %s)", plural(d, "attempt"), 100*float64(d)/float64(g.Attempts), count(g.Attempts))
	case d < 0:
		saved = fmt.Sprintf("that added %s (%s as given)", plural(-d, "attempt"), count(g.Attempts))
	default:
		saved = fmt.Sprintf("that left the attempts at %s, as given", count(g.Attempts))
	}
	switch d := g.Drain - b.Drain; {
	case d > 0:
		saved += fmt.Sprintf(" and %.1f s of drain", d.Seconds())
	case d < 0:
		saved += fmt.Sprintf(" and lengthened the drain by %.1f s", (-d).Seconds())
	}
	cost := fmt.Sprintf("cost %s dead-lettered (%s as given)", plural(b.DeadLettered, "job"), count(g.DeadLettered))
	if g.DeadLettered == 0 && g.Delivered == g.Jobs {
		cost = fmt.Sprintf("cost %s dead-lettered that as given delivered", plural(b.DeadLettered, "job"))
	}
	return fmt.Sprintf("The budget refused %s%s: %s, and %s.", plural(refused, "retry"), when, saved, cost)
}

// serverDelayLesson: what the server's Retry-After does.
func serverDelayLesson(told, hangs *sim.DrillResult) string {
	meet := "meet"
	if told.InOutage() == 1 {
		meet = "meets"
	}
	return fmt.Sprintf("When the down provider answers 503 with Retry-After instead of hanging, its delay sets %s: the jobs wait until it is back instead of spending their attempts, so %s %s the outage (%s when it hangs) and %s delivered (%s when it hangs).",
		plural(len(told.ServerWaits), "wait"), plural(told.InOutage(), "attempt"), meet, count(hangs.InOutage()),
		isAre(told.Summary.Delivered, "job"), count(hangs.Summary.Delivered))
}

// wave is a crowd of attempts that arrived at the same instant.
type wave struct {
	at   time.Duration
	size int
}

// waves returns, in time order, the instants at which at least minSize
// attempts arrived together.
func waves(times []time.Duration, minSize int) []wave {
	at := map[time.Duration]int{}
	for _, t := range times {
		at[t]++
	}
	var out []wave
	for t, n := range at {
		if n >= minSize {
			out = append(out, wave{t, n})
		}
	}
	slices.SortFunc(out, func(a, b wave) int { return cmp.Compare(a.at, b.at) })
	return out
}

// near reports whether a and b differ by at most tolerance.
func near(a, b int, tolerance float64) bool {
	return math.Abs(float64(a-b)) <= tolerance
}

// isAre formats n, a noun and its verb: "1 job is", "5 jobs are".
func isAre(n int, noun string) string {
	if n == 1 {
		return plural(n, noun) + " is"
	}
	return plural(n, noun) + " are"
}

// plural formats n and a noun, "1 wave", "5 waves", "2 retries".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case noun == "retry":
		noun = "retries"
	default:
		noun += "s"
	}
	return count(n) + " " + noun
}
