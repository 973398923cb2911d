package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
)

// The outage drill: a batch of notification jobs meets a provider outage.
//
// All jobs are queued at time 0 (DrillConfig.Arrival can spread them out). A
// worker does not sleep on a job: it keeps, for each job, the time of its
// next attempt, computed by retry.Next from the attempt's error, and a
// dispatcher sends jobs as they come due. A job whose
// retries Next or the budget refuse goes to the dead-letter list with the
// reason. Every attempt carries the job's idempotency key, so the provider
// sends each notification at most once.
//
// Details the scenario leaves open, decided here:
//
//   - Down means no answer: from time 0 until Outage the provider accepts
//     requests and never replies, so an attempt ends at the policy's
//     AttemptTimeout with context.DeadlineExceeded, an outcome the worker
//     cannot tell from a lost reply. (With no AttemptTimeout it answers 503 at
//     once instead.) Nothing is sent while it is down. With DownRetryAfter it
//     says so instead: 503 at once, with Retry-After set to the time until it
//     is back, rounded up to whole seconds.
//   - Once up, the provider serves at most Capacity requests in each
//     one-second window of virtual time (windows start at whole seconds since
//     time 0). Above that it answers 429 with Retry-After set to the time
//     until the window resets, rounded up to whole seconds as the header
//     carries them: so always 1 s. Throttled requests do not count against
//     the capacity.
//   - A served request with a new key sends the notification; one with a key
//     already sent answers 200 without sending again (a duplicate
//     suppressed). A fraction LostReplies of served requests lose their reply
//     on the way back: the worker sees a timeout at AttemptTimeout and
//     retries with the same key.
//   - The limiter delays a job when it comes due: the dispatcher takes due
//     jobs in order and reserves a token for each (ReserveN(due, 1)); the
//     attempt goes out after the reservation's delay. Reserving in due order
//     makes the limiter a FIFO queue, so the provider never sees more than
//     the limit plus the burst in any second. (Do reserves when it decides
//     to retry, and waits max(backoff, the reservation's delay); here the
//     queue of first attempts is longer than any backoff, so that gives
//     nearly the same schedule.)
//   - The budget is asked as Do asks it: a deposit when a job's first
//     attempt is sent, a withdrawal after each failure that Next would retry;
//     a refusal dead-letters the job at once.
//   - A retry's wait was set by the server when Next's wait is longer than
//     the policy's backoff alone, drawn with the same u: the Retry-After
//     outlasted the backoff, and Next waited for it.
//   - A job is delivered when the worker gets a 200 (a duplicate's
//     included); its delivery latency runs from its queueing until then.

// Parameters of the drill.
const (
	DrillJobs        = 10_000
	DrillOutage      = 10 * time.Second
	DrillCapacity    = 300 // requests per second once the provider is up
	DrillLostReplies = 0.01
)

// epoch is virtual time 0 as a time.Time, for the limiter, the budget and
// Next, which take the time as an argument.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// DrillPolicy returns the policy of the drill as given: at most 5 attempts,
// Exponential{Base: 500ms, Cap: 30s} with full jitter, a 2 s attempt timeout,
// and a fresh provider-wide rate.Limiter of 200 attempts per second (burst
// 20), retries included. It is the design notes' policy without the budget.
func DrillPolicy() retry.Policy {
	return retry.Policy{
		MaxAttempts:    5,
		Backoff:        retry.Exponential{Base: 500 * time.Millisecond, Cap: 30 * time.Second},
		Limiter:        &VirtualLimiter{rate.NewLimiter(200, 20)},
		AttemptTimeout: 2 * time.Second,
	}
}

// VirtualLimiter is a retry.Limiter in the simulation's virtual time: its
// rate.Limiter is asked at the time Reserve is given, which the simulation,
// on one goroutine, only moves forward. retry.RateLimiter reads the real
// clock instead, as a limiter shared by goroutines must.
type VirtualLimiter struct{ *rate.Limiter }

// Reserve books an attempt at t on the rate.Limiter.
func (l *VirtualLimiter) Reserve(_ context.Context, t time.Time) (retry.Reservation, error) {
	r := l.ReserveN(t, 1)
	if !r.OK() {
		return retry.Reservation{}, errNoToken
	}
	return retry.Reservation{Start: t.Add(r.DelayFrom(t)), Handle: r}, nil
}

// Cancel gives the booking's token back at its own time.
func (l *VirtualLimiter) Cancel(r retry.Reservation) {
	if res, ok := r.Handle.(*rate.Reservation); ok {
		res.CancelAt(r.Start)
	}
}

// LimitOf returns the rate of a VirtualLimiter, 0 for any other.
func LimitOf(l retry.Limiter) float64 {
	if v, ok := l.(*VirtualLimiter); ok {
		return float64(v.Limit())
	}
	return 0
}

// virtualAdaptive is an adaptive.Limiter driven in the simulation's virtual
// time, as adaptive's README says: Reserve books at the time it is given,
// for that time (ReserveAt), and the drill tells it how each attempt ended
// with LearnAt, before it decides the retry. adaptive.Limiter reads the
// real clock in Reserve and Learn instead.
type virtualAdaptive struct{ *adaptive.Limiter }

// Reserve books an attempt at t, for t.
func (v virtualAdaptive) Reserve(_ context.Context, t time.Time) (retry.Reservation, error) {
	return v.ReserveAt(t, t), nil
}

// learnerAt is a limiter told, in virtual time, how each attempt ended.
type learnerAt interface {
	LearnAt(now time.Time, d time.Duration, err error)
}

// riverBackoff is River's default retry schedule (riverqueue/river,
// internal/retrypolicy: DefaultClientRetryPolicy): the wait after the n-th
// failure is n^4 seconds, with jitter of up to 10% either way, so 1 s, 16 s,
// 81 s, 256 s, 625 s... It is a plain value, safe for concurrent use.
type riverBackoff struct{}

// Delay returns n^4 seconds times 1 + 0.2u - 0.1; an n below 1 counts as 1.
func (riverBackoff) Delay(n int, _ time.Duration, u float64) time.Duration {
	s := math.Pow(float64(max(n, 1)), 4)
	s += s * (2*u - 1) * riverJitter
	if s >= maxSeconds {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// River's jitter fraction and its default MaxAttempts.
const (
	riverJitter      = 0.1
	riverMaxAttempts = 25
)

var maxSeconds = time.Duration(math.MaxInt64).Seconds()

// DrillConfig is one run of the drill. The Policy's Limiter and Budget hold
// state, so a DrillConfig runs once; build a fresh one (DrillVariants) for
// each run.
type DrillConfig struct {
	Name string
	// Change says, for a reader, what differs from the policy as given.
	Change string
	Jobs   int
	// Arrival spreads the jobs' queueing evenly over [0, Arrival): job i is
	// queued at i*Arrival/Jobs. 0 queues them all at time 0.
	Arrival     time.Duration
	Outage      time.Duration // the provider is down from time 0 until then
	Capacity    int           // requests served per one-second window once up
	LostReplies float64       // fraction of served requests whose reply is lost
	// DownRetryAfter makes the provider answer while it is down: 503 at
	// once, with Retry-After set to the time until it is back (rounded up to
	// whole seconds), instead of never answering.
	DownRetryAfter bool
	// IgnoreRetryAfter makes the worker deaf to the provider's Retry-After,
	// as River's default retry policy is: it retries on its own schedule.
	IgnoreRetryAfter bool
	// Policy decides each retry through retry.Next; its Limiter paces every
	// attempt and its Budget, if any, must grant every retry.
	Policy retry.Policy
	Seed   uint64
}

// DrillNames are the names of the drill's variants, in the order
// DrillVariants returns them.
var DrillNames = struct {
	AsGiven, NoJitter, NoLimiter, NoJitterNoLimiter, Budget10, ServerDelay, Adaptive, River string
}{
	AsGiven:           "as given",
	NoJitter:          "no jitter",
	NoLimiter:         "no limiter",
	NoJitterNoLimiter: "no jitter, no limiter",
	Budget10:          "10% budget",
	ServerDelay:       "no limiter, 503 + Retry-After",
	Adaptive:          "adaptive limiter",
	River:             "River's default",
}

// DrillVariants returns the drill's comparison, each with fresh state, each
// the policy as given with one or two things changed, so that each teaches
// one thing (named as in DrillNames):
//
//   - AsGiven: the policy as given (jitter and the limiter);
//   - NoJitter: the same without jitter (what jitter adds behind a limiter);
//   - NoLimiter: without the limiter (what the limiter adds with jitter);
//   - NoJitterNoLimiter: without either (what jitter adds with no limiter,
//     and what the limiter adds without jitter);
//   - Budget10: with a 10% retry budget (retry.NewBudget(0.1, 0): no floor,
//     so the ratio alone decides);
//   - ServerDelay: NoLimiter against a provider that, while down, answers
//     503 with Retry-After instead of hanging (what a server's delay does);
//   - Adaptive: an adaptive.Limiter, which is given no rate, in place of the
//     rate.Limiter (what learning the rate costs against knowing it);
//   - River: River's default retry policy in place of the policy (its
//     schedule, riverBackoff, its 25 attempts, no limiter, deaf to
//     Retry-After), with the drill's attempt timeout: what a queue's
//     default does.
func DrillVariants(seed uint64) []DrillConfig {
	base := func(name string) DrillConfig {
		return DrillConfig{
			Name: name, Jobs: DrillJobs, Outage: DrillOutage, Capacity: DrillCapacity,
			LostReplies: DrillLostReplies, Policy: DrillPolicy(), Seed: seed,
		}
	}
	noJitter := func(p *retry.Policy) {
		e := p.Backoff.(retry.Exponential)
		e.Jitter = retry.NoJitter
		p.Backoff = e
	}
	given := base(DrillNames.AsGiven)
	given.Change = "nothing"
	nj := base(DrillNames.NoJitter)
	nj.Change = "Jitter: retry.NoJitter"
	noJitter(&nj.Policy)
	nl := base(DrillNames.NoLimiter)
	nl.Change = "no Limiter"
	nl.Policy.Limiter = nil
	neither := base(DrillNames.NoJitterNoLimiter)
	neither.Change = "Jitter: retry.NoJitter and no Limiter"
	noJitter(&neither.Policy)
	neither.Policy.Limiter = nil
	budget := base(DrillNames.Budget10)
	budget.Change = "Budget: retry.NewBudget(0.1, 0): retries up to 10% of first attempts, no per-second floor"
	budget.Policy.Budget = retry.NewBudget(0.1, 0)
	told := base(DrillNames.ServerDelay)
	told.Change = "no Limiter, and the provider, while down, answers 503 at once with Retry-After: the seconds until it is back"
	told.Policy.Limiter = nil
	told.DownRetryAfter = true
	learned := base(DrillNames.Adaptive)
	learned.Change = "Limiter: an adaptive.Limiter, given no rate, which learns the provider's from its 429s"
	learned.Policy.Limiter = virtualAdaptive{&adaptive.Limiter{}}
	river := base(DrillNames.River)
	river.Change = fmt.Sprintf("River's default retry policy: %d attempts, waits of attempt^4 s with 10%% jitter (1 s, 16 s, 81 s, 256 s...), "+
		"no limiter, Retry-After not read; the attempt timeout stays 2 s", riverMaxAttempts)
	river.Policy.MaxAttempts = riverMaxAttempts
	river.Policy.Backoff = riverBackoff{}
	river.Policy.Limiter = nil
	river.IgnoreRetryAfter = true
	return []DrillConfig{given, nj, nl, neither, budget, told, learned, river}
}

// AttemptResult is what became of one attempt at the provider.
type AttemptResult uint8

const (
	// Sent: served, the notification was sent, and the reply arrived.
	Sent AttemptResult = iota
	// Duplicate: served, but the key had been sent before, so the provider
	// answered 200 without sending again.
	Duplicate
	// LostReply: served (sent or duplicate), but the reply was lost and the
	// worker timed out.
	LostReply
	// Throttled: above capacity, answered 429 with Retry-After.
	Throttled
	// Down: the provider was down and silent; the worker timed out (or, with
	// no AttemptTimeout, got a 503 at once).
	Down
	// Unavailable: the provider was down and said so (DownRetryAfter): 503
	// with Retry-After until it is back.
	Unavailable
)

// String returns the result's name.
func (r AttemptResult) String() string {
	switch r {
	case Sent:
		return "sent"
	case Duplicate:
		return "duplicate"
	case LostReply:
		return "lost reply"
	case Throttled:
		return "throttled"
	case Down:
		return "down"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("AttemptResult(%d)", uint8(r))
}

// Attempt is one attempt as the provider saw it.
type Attempt struct {
	At     time.Duration // virtual time it reached the provider
	Job    int
	N      int // 1 for the job's first attempt
	Result AttemptResult
}

// DeadLetter is a job that was given up on.
type DeadLetter struct {
	Job int
	At  time.Duration // when it was given up on: its last attempt's answer, or timeout
	// LastAttempt is when its last attempt reached the provider (At for a
	// job that made none).
	LastAttempt time.Duration
	Attempts    int
	Reason      error // retry.ErrExhausted, retry.ErrBudgetExhausted, ...
	Last        error // the last attempt's error
}

// DrillResult is the outcome of one run of the drill.
type DrillResult struct {
	Name        string
	Summary     Summary
	Attempts    []Attempt // in the order they reached the provider
	DeadLetters []DeadLetter
	// Sent is the number of notifications the provider sent; with the
	// idempotency key it is at most one per job, whatever the retries.
	Sent int
	// ServerWaits holds, for each retry whose wait the server's Retry-After
	// set (it was longer than the backoff), the virtual time it was decided.
	ServerWaits []time.Duration
	// Outage is when the provider came back.
	Outage time.Duration
	// LimiterRate holds, for each clock second, the rate an adaptive
	// limiter had booked the last attempt sent in that second at, in
	// attempts per second: NaN for a second with no attempt, 0 while it
	// paced none (before its first 429). nil for any other limiter.
	LimiterRate []float64
}

// Count returns the number of attempts with the given result.
func (r *DrillResult) Count(res AttemptResult) int {
	n := 0
	for _, a := range r.Attempts {
		if a.Result == res {
			n++
		}
	}
	return n
}

// RetriedAfter returns the number of attempts with the given result that
// the job retried.
func (r *DrillResult) RetriedAfter(res AttemptResult) int {
	last := map[int]AttemptResult{}
	n := 0
	for _, a := range r.Attempts {
		if prev, ok := last[a.Job]; ok && prev == res {
			n++
		}
		last[a.Job] = a.Result
	}
	return n
}

// InOutage returns the number of attempts that met the provider down.
func (r *DrillResult) InOutage() int {
	n := 0
	for _, a := range r.Attempts {
		if a.At < r.Outage {
			n++
		}
	}
	return n
}

// Times returns the times of the attempts whose result is one of results,
// or of every attempt if none is given.
func (r *DrillResult) Times(results ...AttemptResult) []time.Duration {
	var out []time.Duration
	for _, a := range r.Attempts {
		if len(results) == 0 || slices.Contains(results, a.Result) {
			out = append(out, a.At)
		}
	}
	return out
}

// DeadTimes returns, for each dead-lettered job, the time its last attempt
// reached the provider, not the later time it was given up on (after that
// attempt's timeout, say): counted so, per second, the dead letters of a
// second are some of that second's attempts, never more than them.
func (r *DrillResult) DeadTimes() []time.Duration {
	out := make([]time.Duration, len(r.DeadLetters))
	for i, d := range r.DeadLetters {
		out[i] = d.LastAttempt
	}
	return out
}

// DeadByReason returns the dead letters counted by reason, in order of
// first appearance. Reasons with the same text count as one: two errors
// made alike are the same reason to a reader.
func (r *DrillResult) DeadByReason() []ReasonCount {
	var out []ReasonCount
	for _, d := range r.DeadLetters {
		i := slices.IndexFunc(out, func(rc ReasonCount) bool {
			return rc.Reason == d.Reason || rc.Reason != nil && d.Reason != nil && rc.Reason.Error() == d.Reason.Error()
		})
		if i < 0 {
			out = append(out, ReasonCount{Reason: d.Reason})
			i = len(out) - 1
		}
		out[i].Count++
	}
	return out
}

// ReasonCount is a number of dead letters with one reason.
type ReasonCount struct {
	Reason error
	Count  int
}

// The errors the worker sees.
var (
	errNoAnswer = fmt.Errorf("provider: no answer within the attempt timeout: %w", context.DeadlineExceeded)
	errDown     = &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"}
	errNoToken  = errors.New("sim: the limiter's burst is 0: no attempt can start")
)

// Kinds of drill event.
const (
	jobDue    uint8 = iota // the job's persisted next-attempt time has come
	jobSend                // the attempt reaches the provider
	jobAnswer              // the attempt's outcome reaches the worker
)

type drillEvent struct {
	kind   uint8
	result AttemptResult // jobAnswer
	job    int32
	err    error   // jobAnswer: the error for a failed attempt
	rate   float64 // jobSend: an adaptive limiter's rate at its booking; NaN for none
}

// RunDrill runs the drill in virtual time and returns its outcome. Every
// job ends delivered or dead-lettered. It panics if c.Jobs is negative.
func RunDrill(c DrillConfig) DrillResult {
	p := c.Policy
	rng := rand.New(rand.NewPCG(c.Seed, 0x0dd1))
	res := DrillResult{Name: c.Name, Outage: c.Outage, Attempts: make([]Attempt, 0, c.Jobs*5/4)}
	backoff := p.Backoff
	if backoff == nil {
		backoff = retry.Exponential{} // the policy's default
	}
	var (
		q         Queue[drillEvent]
		attempts  = make([]int, c.Jobs)
		lastSent  = make([]time.Duration, c.Jobs) // when each job's last attempt reached the provider
		prev      = make([]time.Duration, c.Jobs)
		keys      = make([]bool, c.Jobs) // the provider's idempotency-key store
		latencies = make([]time.Duration, 0, c.Jobs)
		window    = time.Duration(-1) // the provider's current one-second window
		served    int                 // requests served in it
		finished  time.Duration       // when the last job was delivered or dead-lettered
	)
	lost := c.LostReplies
	if p.AttemptTimeout <= 0 {
		lost = 0 // a lost reply with no timeout would hang the job for ever
	}
	deadLetter := func(job int, now time.Duration, reason, last error) {
		sent := now
		if attempts[job] > 0 {
			sent = lastSent[job]
		}
		res.DeadLetters = append(res.DeadLetters, DeadLetter{Job: job, At: now, LastAttempt: sent, Attempts: attempts[job], Reason: reason, Last: last})
		finished = now
	}
	// provider decides the fate of an attempt that reaches it at now.
	provider := func(now time.Duration, job int) (AttemptResult, error) {
		if now < c.Outage {
			if c.DownRetryAfter {
				return Unavailable, &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable", RetryAfter: wholeSeconds(c.Outage - now)}
			}
			if p.AttemptTimeout > 0 {
				return Down, errNoAnswer
			}
			return Down, errDown
		}
		if w := now.Truncate(time.Second); w != window {
			window, served = w, 0
		}
		if served >= c.Capacity {
			e := &retry.ResponseError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: wholeSeconds(window + time.Second - now)}
			if c.IgnoreRetryAfter {
				e.RetryAfter = 0 // the header is sent; the worker does not read it
			}
			return Throttled, e
		}
		served++
		r := Sent
		if keys[job] {
			r = Duplicate
		} else {
			keys[job] = true
			res.Sent++
		}
		if lost > 0 && rng.Float64() < lost {
			return LostReply, errNoAnswer
		}
		return r, nil
	}

	queued := func(job int) time.Duration {
		if c.Arrival <= 0 {
			return 0
		}
		return time.Duration(int64(job) * int64(c.Arrival) / int64(c.Jobs))
	}
	for j := range c.Jobs {
		q.Schedule(queued(j), drillEvent{kind: jobDue, job: int32(j)})
	}
	for {
		ev, ok := q.Pop()
		if !ok {
			break
		}
		now, job := q.Now(), int(ev.job)
		t := epoch.Add(now)
		switch ev.kind {
		case jobDue:
			var delay time.Duration
			rate := math.NaN()
			if p.Limiter != nil {
				r, err := p.Limiter.Reserve(context.Background(), t)
				if err != nil {
					deadLetter(job, now, errNoToken, nil)
					continue
				}
				delay = max(r.Start.Sub(t), 0)
				if a, ok := p.Limiter.(virtualAdaptive); ok {
					rate = a.Rate()
				}
			}
			q.After(delay, drillEvent{kind: jobSend, job: ev.job, rate: rate})
		case jobSend:
			if !math.IsNaN(ev.rate) {
				k := bin(now)
				for len(res.LimiterRate) <= k {
					res.LimiterRate = append(res.LimiterRate, math.NaN())
				}
				res.LimiterRate[k] = ev.rate
			}
			attempts[job]++
			if attempts[job] == 1 && p.Budget != nil {
				p.Budget.Deposit(t)
			}
			lastSent[job] = now
			r, err := provider(now, job)
			res.Attempts = append(res.Attempts, Attempt{At: now, Job: job, N: attempts[job], Result: r})
			var after time.Duration
			if r == Down || r == LostReply {
				after = max(p.AttemptTimeout, 0)
			}
			q.After(after, drillEvent{kind: jobAnswer, job: ev.job, result: r, err: err})
		case jobAnswer:
			if l, ok := p.Limiter.(learnerAt); ok {
				l.LearnAt(t, now-lastSent[job], ev.err)
			}
			if ev.err == nil {
				latencies = append(latencies, now-queued(job))
				finished = now
				continue
			}
			u := rng.Float64()
			wait, stop := retry.Next(p, attempts[job], prev[job], ev.err, t, time.Time{}, u)
			if stop != nil {
				deadLetter(job, now, stop, ev.err)
				continue
			}
			if p.Budget != nil && !p.Budget.Withdraw(t) {
				deadLetter(job, now, retry.ErrBudgetExhausted, ev.err)
				continue
			}
			if wait > backoff.Delay(attempts[job], prev[job], u) {
				res.ServerWaits = append(res.ServerWaits, now)
			}
			prev[job] = wait
			q.After(wait, drillEvent{kind: jobDue, job: ev.job})
		}
	}
	times := make([]time.Duration, len(res.Attempts))
	for i, a := range res.Attempts {
		times[i] = a.At
	}
	res.Summary = Summarize(c.Jobs, c.Outage, times, latencies, len(res.DeadLetters), finished)
	res.Summary.Duplicates = res.Count(Duplicate)
	return res
}

// wholeSeconds rounds d up to whole seconds, as a Retry-After header in
// seconds carries it.
func wholeSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}
