package retryriver

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
)

// Middleware runs River jobs under a [retry.Policy]. It is both a River
// worker middleware ([rivertype.WorkerMiddleware]), which sees each
// attempt's error and decides with [retry.Next], and River's
// [river.ClientRetryPolicy], which hands River the time that decision gave.
// Install it with [Middleware.Config], which sets both, and River's
// MaxAttempts and JobTimeout, in one line.
//
// After a failed attempt, in this order: a [river.JobSnooze] or
// [river.JobCancel] from the worker goes back to River untouched; an error
// from a job whose context River ended (client stopping, job cancelled
// remotely) goes back to River too, its attempt marked outcome-unknown
// (see [MetadataOutcomeUnknown]); an error
// the policy stops on ([retry.Permanent], classified Stop, a server delay
// above MaxRetryAfter, no time left before the job's deadline, the budget
// refusing the retry) cancels the job at once with a [*retry.Error] that
// keeps the error; the last allowed attempt's error leaves the job to River,
// which discards it with every attempt's error; any other error is returned
// to River and the job is scheduled at the time retry.Next gave.
//
// Before an attempt, a job that the policy's Concurrency or Breaker
// refuses is snoozed, not failed (see the package documentation).
//
// The zero value runs jobs under the zero retry.Policy (the core's
// defaults); [New] gives it a policy. A Middleware is safe for concurrent
// use by all of a client's workers, and one Middleware belongs to one River
// client (its Budget and Limiter count that process's attempts).
type Middleware struct {
	river.MiddlewareDefaults

	policy   retry.Policy
	deadline func(*rivertype.JobRow) time.Time
	handoff  handoff
}

// Option configures a [Middleware] made by [New].
type Option func(*Middleware)

// WithDeadline gives each job a deadline, the counterpart of the caller's
// context deadline in [retry.Do]: no attempt starts at or after it, each
// attempt's context ends by it, and a retry that could not start
// Policy.MinAttemptTime before it is not scheduled: the job is cancelled
// with [retry.ErrNoTimeLeft]. f is called once per attempt, from any worker
// goroutine; a zero time means no deadline. A nil f means none.
//
// For example, to give up on a notification an hour after it was queued:
//
//	retryriver.WithDeadline(func(job *rivertype.JobRow) time.Time { return job.CreatedAt.Add(time.Hour) })
func WithDeadline(f func(job *rivertype.JobRow) time.Time) Option {
	return func(m *Middleware) { m.deadline = f }
}

// New returns a Middleware that runs every job under p. p is copied; its
// Budget, Limiter, Concurrency and Breaker, if any, are shared by every job
// this client works, so they apply to the attempts of one worker process
// (unless one is shared by the fleet, or with other policies). p.Observe, if set, is
// called on the worker goroutine with the job's context: after each attempt
// (with Retry and Wait when a retry is scheduled; the wait is one value,
// set by the server's delay when that is at least as long, else by the
// backoff), and with Done when the job ends here, delivered or stopped. A
// job whose attempts run in several processes is observed in each.
func New(p retry.Policy, opts ...Option) *Middleware {
	m := &Middleware{policy: p}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	return m
}

// maxRiverAttempts is the largest max_attempts River stores (a smallint).
const maxRiverAttempts = math.MaxInt16

// MaxAttempts returns the max_attempts River should give jobs so that it
// agrees with the policy: Policy.MaxAttempts, 4 when it is 0 (the core's
// default), and 32767, the largest River stores, when it is negative (no
// limit: the job's deadline or the classifier bounds it).
func (m *Middleware) MaxAttempts() int {
	switch n := m.policy.MaxAttempts; {
	case n == 0:
		return 4
	case n < 0 || n > maxRiverAttempts:
		return maxRiverAttempts
	default:
		return n
	}
}

// Config returns a copy of cfg (nil means a zero river.Config) that runs
// every job under the policy: m is appended to its Middleware, it is the
// RetryPolicy, MaxAttempts is [Middleware.MaxAttempts], and, when the
// policy has an AttemptTimeout, so is JobTimeout. It is the one-line setup:
//
//	client, err := river.NewClient(riverpgxv5.New(pool), retryriver.New(policy).Config(&river.Config{
//		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
//		Workers: workers,
//	}))
//
// Give every client that inserts these jobs the same line, a client that
// only inserts included (river.NewClient(driver, m.Config(nil))): River
// stamps a job's max_attempts when it is inserted, from the inserting
// client's MaxAttempts, whose default is 25, and the middleware honours each
// job's value. A job inserted with its own MaxAttempts (InsertOpts,
// JobArgsWithInsertOpts) keeps it, and River and the policy still agree on
// when it is exhausted. A worker that defines its own NextRetry or Timeout
// overrides the schedule or the timeout for its jobs, as it does in River.
//
// JobTimeout is River's own bound on each attempt's context, applied inside
// the middleware's, 1 minute unless set: left alone, it would silently cut
// a longer AttemptTimeout to a minute. Config sets it to the policy's
// AttemptTimeout rather than refusing or only documenting the clash,
// because the policy is what should run, and River's stuck-job watch and
// rescuer then count from the same bound. With no AttemptTimeout, cfg's
// JobTimeout stays (River's 1 minute if unset; -1 for none).
//
// Config leaves RescueStuckJobsAfter alone (River's default is an hour, or
// JobTimeout plus an hour when that is longer). An attempt that waits for
// the policy's Limiter is running in River's eyes from the moment it was
// fetched, and River's rescuer takes back a job that has been running
// longer than RescueStuckJobsAfter and JobTimeout, even while its worker is
// alive: it then runs twice, and the middleware marks the first run
// outcome-unknown. Keep RescueStuckJobsAfter above AttemptTimeout plus the
// longest limiter wait, about the client's MaxWorkers divided by the
// limiter's rate (every worker slot waiting its turn), plus a margin for a
// stalled process. Config cannot compute that bound for every limiter (one
// shared with other processes waits longer), and River's hour is far above
// it at any usual rate.
func (m *Middleware) Config(cfg *river.Config) *river.Config {
	var c river.Config
	if cfg != nil {
		c = *cfg
	}
	c.Middleware = append(slices.Clip(c.Middleware), m)
	c.RetryPolicy = m
	c.MaxAttempts = m.MaxAttempts()
	if m.policy.AttemptTimeout > 0 {
		c.JobTimeout = m.policy.AttemptTimeout
	}
	return &c
}

// Work runs one attempt of job under the policy; River calls it around the
// worker. Before the attempt it marks the job's earlier attempts whose end
// it never saw (see [MetadataOutcomeUnknown]), stops the job if its
// deadline has come, admits the attempt with [retry.Policy.Admit] (the
// Limiter's turn, waited for on a timer that the job's context interrupts,
// a Concurrency slot and the Breaker; a job they refuse is snoozed, see the
// package documentation) and deposits in the Budget once per job, at its
// first attempt; it bounds the attempt by
// Policy.AttemptTimeout and the deadline; after a failed attempt it decides
// as [Middleware] says, records the decision in the job's metadata, and
// leaves the next attempt's time for [Middleware.NextRetry]. The slot is
// given back as soon as the worker returns. A panic in the worker gives it
// back too, and propagates to River unchanged, its attempt marked
// outcome-unknown.
func (m *Middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	p := m.policy
	st := readState(job.Metadata)
	if st.lostAttempts(job.Attempt, job.Errors) {
		// Written now, not when this attempt ends: River stores the metadata
		// set during a run with whatever ends it (the worker's JobCancel or
		// JobSnooze, a remote cancel, a stop, a panic), so the mark survives
		// them all.
		_ = river.MetadataSet(ctx, MetadataOutcomeUnknown, st.Unknown)
	}
	deadline := m.jobDeadline(job)

	done, reason := p.Admit(ctx, deadline)
	if reason != nil {
		if ctx.Err() != nil {
			// River ended the job's context while it waited for the limiter
			// or a slot (the client is stopping): give it back untouched, so
			// River makes it available again without counting the attempt.
			return reason
		}
		now := time.Now()
		if wait, held := m.hold(reason, now, deadline); held != "" {
			// No attempt may start now, but nothing is wrong with the job,
			// and none was made: it waits, as a snooze, which River does not
			// count as an attempt, marked so that OldestWaiting finds it.
			_ = river.MetadataSet(ctx, MetadataHeld, held)
			return river.JobSnooze(wait)
		}
		return m.stop(ctx, job, &st, reason, nil, now)
	}
	if st.Held != "" {
		_ = river.MetadataSet(ctx, MetadataHeld, nil) // admitted: no longer held
	}
	now := time.Now()
	if p.Budget != nil && job.Attempt <= 1 && !st.Deposited {
		p.Budget.Deposit(now)
		_ = river.MetadataSet(ctx, metadataDeposited, true)
	}

	err := m.run(ctx, job, &st, now, deadline, doInner, done)
	if err == nil {
		if p.Observe != nil {
			end := time.Now()
			p.Observe(ctx, retry.Event{Attempt: job.Attempt, Duration: end.Sub(now), Elapsed: end.Sub(job.CreatedAt)})
			p.Observe(ctx, retry.Event{Attempt: job.Attempt, Done: true, Elapsed: end.Sub(job.CreatedAt),
				OutcomeUnknown: len(st.Unknown) > 0})
		}
		return nil
	}
	began := now
	var snooze *rivertype.JobSnoozeError
	if errors.As(err, &snooze) || errors.Is(err, &rivertype.JobCancelError{}) {
		return err // the worker's own answer, for River to carry out
	}
	if ctx.Err() != nil {
		// River ended the job's context during the attempt (the job was
		// cancelled remotely, or the client is stopping with StopAndCancel or
		// its SoftStopTimeout): the attempt was cut off, and may have done
		// work. River cancels the job, or makes it available again with the
		// same attempt number, and stores the mark either way.
		m.markUnknown(ctx, job, &st)
		return err
	}
	now = time.Now()
	unknown := retry.OutcomeUnknown(err)
	if unknown {
		st.mark(job.Attempt)
	}
	observed := retry.Event{Attempt: job.Attempt, Err: err, Duration: now.Sub(began), Elapsed: now.Sub(job.CreatedAt),
		OutcomeUnknown: unknown}
	rp := p
	rp.MaxAttempts = job.MaxAttempts // River discards when attempt >= max_attempts; so does Next
	if rp.MaxAttempts <= 0 {
		rp.MaxAttempts = m.MaxAttempts()
	}
	u := rand.Float64
	if p.Rand != nil {
		u = p.Rand
	}
	wait, reason := retry.Next(rp, job.Attempt, st.prevWait, err, now, deadline, u())
	if reason == nil && p.Budget != nil && !p.Budget.Withdraw(now) {
		reason = retry.ErrBudgetExhausted
	}
	if reason != nil {
		if p.Observe != nil {
			p.Observe(ctx, observed)
		}
		return m.stop(ctx, job, &st, reason, err, now)
	}
	m.handoff.put(job.ID, job.Attempt, now.Add(wait), now)
	m.record(ctx, job, &st, wait, "")
	if p.Observe != nil {
		observed.Retry, observed.Wait = true, wait
		var re *retry.ResponseError
		if errors.As(err, &re) && re.RetryAfter >= wait {
			observed.ServerDelay = re.RetryAfter
		} else {
			observed.Backoff = wait
		}
		p.Observe(ctx, observed)
	}
	return err
}

// run makes the attempt, and calls done, Admit's, as soon as it has ended,
// so that its slot is free while the middleware decides what follows. A
// worker that panics may have done work first: its attempt is marked
// outcome-unknown on the way out, its slot given back, and the panic goes
// on to River unchanged, which stores the mark with the panic's error.
func (m *Middleware) run(ctx context.Context, job *rivertype.JobRow, st *state, now, deadline time.Time,
	doInner func(context.Context) error, done func(error)) error {
	returned := false
	defer func() {
		if !returned {
			done(retry.Permanent(errPanicked)) // says nothing of the dependency
			m.markUnknown(ctx, job, st)
		}
	}()
	err := attempt(ctx, now, m.policy.AttemptTimeout, deadline, doInner)
	returned = true
	done(news(ctx, err))
	return err
}

// errPanicked stands for the error of an attempt whose worker panicked, as
// Admit's done receives it.
var errPanicked = errors.New("retryriver: worker panicked")

// news returns err as Admit's done should judge it. A worker's own snooze
// or cancel, and an attempt that River cut off, say nothing of the
// dependency's health: marked Permanent, which the core judges before any
// classifier, they count for the Breaker neither way, and the Concurrency
// is told the attempt said nothing. Every other error is judged by the
// policy's classifier, as the loop judges it.
func news(ctx context.Context, err error) error {
	var snooze *rivertype.JobSnoozeError
	if err != nil && (ctx.Err() != nil || errors.As(err, &snooze) || errors.Is(err, &rivertype.JobCancelError{})) {
		return retry.Permanent(err)
	}
	return err
}

// hold says how long a job that Admit refused should wait, snoozed, and
// why, for MetadataHeld; "" when it should stop instead:
//
//   - a shared Limiter or Concurrency whose store is down and set to fail
//     closed (fleet.ErrUnavailable): limiterSnooze, "store";
//   - an open Breaker: until the time it may let an attempt through (its
//     reason's Until), "breaker";
//   - no Concurrency slot (retry.ErrNoSlot): a jittered slotSnooze, "slot",
//     so that the jobs refused together do not all come back at once.
//
// A job with a deadline stops instead when the attempt after the wait
// could not start MinAttemptTime before it, as retry.Next would not
// schedule a retry then: waiting would only end in ErrNoTimeLeft.
func (m *Middleware) hold(reason error, now, deadline time.Time) (time.Duration, string) {
	var wait time.Duration
	var held string
	var open interface{ Until() time.Time }
	switch {
	case errors.Is(reason, fleet.ErrUnavailable):
		wait, held = limiterSnooze, heldStore
	case errors.Is(reason, retry.ErrBreakerOpen) && errors.As(reason, &open):
		wait, held = max(open.Until().Sub(now), 0), heldBreaker
	case errors.Is(reason, retry.ErrNoSlot):
		u := rand.Float64
		if m.policy.Rand != nil {
			u = m.policy.Rand
		}
		wait, held = slotSnooze/2+time.Duration(u()*float64(slotSnooze/2)), heldSlot
	default:
		return 0, ""
	}
	if !deadline.IsZero() && !now.Add(wait+m.policy.MinAttemptTime).Before(deadline) {
		return 0, ""
	}
	return wait, held
}

// markUnknown records that job's current attempt ended without an answer
// the middleware can decide on, and may have done work.
func (m *Middleware) markUnknown(ctx context.Context, job *rivertype.JobRow, st *state) {
	st.mark(job.Attempt)
	_ = river.MetadataSet(ctx, MetadataOutcomeUnknown, st.Unknown)
	_ = river.MetadataSet(ctx, MetadataAttempt, job.Attempt)
}

// stop ends the job with the core's reason: River discards it when the
// attempts are exhausted (its own rule gives the same answer), and cancels
// it for every other reason. The stored error is a *retry.Error that keeps
// last, the attempt's error (nil when no attempt was made).
func (m *Middleware) stop(ctx context.Context, job *rivertype.JobRow, st *state, reason, last error, now time.Time) error {
	attempts := job.Attempt
	if last == nil {
		attempts-- // this run made no attempt
	}
	err := &retry.Error{
		Attempts:       max(attempts, 0),
		Elapsed:        now.Sub(job.CreatedAt),
		Reason:         reason,
		Last:           last,
		OutcomeUnknown: len(st.Unknown) > 0,
	}
	m.record(ctx, job, st, 0, strings.TrimPrefix(reason.Error(), "retry: "))
	if m.policy.Observe != nil {
		m.policy.Observe(ctx, retry.Event{Attempt: err.Attempts, Done: true, Err: err, Elapsed: err.Elapsed,
			Reason: reason, OutcomeUnknown: err.OutcomeUnknown})
	}
	if errors.Is(reason, retry.ErrExhausted) {
		return err
	}
	return river.JobCancel(err)
}

// record writes the middleware's state into the job's metadata, merged by
// River with the attempt's outcome.
func (m *Middleware) record(ctx context.Context, job *rivertype.JobRow, st *state, wait time.Duration, stop string) {
	// MetadataSet fails only outside a River work context (a direct call in a
	// test); there is nothing to record into then.
	_ = river.MetadataSet(ctx, MetadataAttempt, job.Attempt)
	if len(st.Unknown) > 0 {
		_ = river.MetadataSet(ctx, MetadataOutcomeUnknown, st.Unknown)
	}
	if wait > 0 {
		_ = river.MetadataSet(ctx, MetadataWait, wait.String())
	}
	if stop != "" {
		_ = river.MetadataSet(ctx, MetadataStop, stop)
	}
}

// NextRetry returns when job's next attempt is due; River calls it after a
// failed attempt that is not its last. It is the time [Middleware.Work]
// decided with retry.Next, never earlier than now (River replaces a time in
// the past with its own default schedule).
//
// When Work made no decision for this attempt (the worker panicked, River's
// rescuer is retrying a job whose worker died, or an error from outside the
// middleware), it applies the policy's backoff to the attempt number, with
// no server delay, since there is no error to read one from. If that
// backoff leaves no time for another attempt before the job's deadline, it
// returns the deadline (now if that has passed): River cannot be told to
// stop from here, so the job waits, no longer than the backoff it would
// have waited, and the next Work cancels it with [retry.ErrNoTimeLeft]
// without running the worker. It is safe for concurrent use.
func (m *Middleware) NextRetry(job *rivertype.JobRow) time.Time {
	now := time.Now()
	if at, ok := m.handoff.take(job.ID, job.Attempt); ok {
		if at.Before(now) {
			return now.UTC()
		}
		return at.UTC()
	}
	p := m.policy
	p.MaxAttempts = -1 // River calls NextRetry only when attempts are left
	u := rand.Float64
	if m.policy.Rand != nil {
		u = m.policy.Rand
	}
	deadline := m.jobDeadline(job)
	wait, reason := retry.Next(p, job.Attempt, readState(job.Metadata).prevWait, errNoDecision, now, deadline, u())
	if reason != nil {
		// No time left (the only reason Next can give for this error and no
		// attempt limit). Now would run the job again at once, and Work would
		// let that attempt start, since only the wait did not fit.
		if deadline.After(now) {
			return deadline.UTC()
		}
		return now.UTC()
	}
	return now.Add(wait).UTC()
}

// limiterSnooze is how long a job waits when its Limiter's store is down:
// the time a fleet.Limiter leaves a failed store alone before it asks again.
const limiterSnooze = time.Second

// slotSnooze bounds how long a job waits, snoozed, when it found no
// Concurrency slot: between half of it and all of it, drawn at random. Short,
// because a slot frees as soon as any attempt ends; not shorter, because
// each snooze is a write to River's table and a fetch.
const slotSnooze = time.Second

// errNoDecision stands for the error of an attempt that Work did not see end.
var errNoDecision = retry.Transient(errors.New("retryriver: attempt ended without a decision"))

// jobDeadline returns the job's deadline, zero for none.
func (m *Middleware) jobDeadline(job *rivertype.JobRow) time.Time {
	if m.deadline == nil {
		return time.Time{}
	}
	return m.deadline(job)
}

// attempt runs doInner on a context that ends at the earlier of now+timeout
// (when timeout is positive) and the deadline (when set).
func attempt(ctx context.Context, now time.Time, timeout time.Duration, deadline time.Time, doInner func(context.Context) error) error {
	end := deadline
	if timeout > 0 && (end.IsZero() || now.Add(timeout).Before(end)) {
		end = now.Add(timeout)
	}
	if end.IsZero() {
		return doInner(ctx)
	}
	actx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	return doInner(actx)
}
