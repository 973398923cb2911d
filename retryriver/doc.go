// Package retryriver runs River jobs (github.com/riverqueue/river) under a
// [retry.Policy]: the same decisions as [retry.Do], but the time of each
// next attempt is stored in River's queue instead of a worker sleeping on
// it, so retries survive restarts and crashes and a worker slot is never
// held for a backoff.
//
// Plug it in where River is configured, in one line:
//
//	client, err := river.NewClient(riverpgxv5.New(pool), retryriver.New(policy).Config(&river.Config{
//		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
//		Workers: workers,
//	}))
//
// [Middleware.Config] adds the [Middleware] to River's Middleware, makes it
// River's RetryPolicy, and sets River's MaxAttempts and JobTimeout from the
// policy. Every client that inserts these jobs needs the same line, a
// client that only inserts included: River stamps max_attempts at insert
// time. It works the same on every River driver (riverpgxv5, riversqlite,
// riverdatabasesql). The module's README has complete programs for SQLite
// and PostgreSQL, migration included, and says what bounds the real spacing
// of attempts (River's fetch polling).
//
// # What happens after an attempt
//
// The middleware wraps each attempt. It sees the worker's error, typed, and
// asks [retry.Next], with the job's attempt number and max_attempts, the wait
// it chose last time (kept in the job's metadata), the job's deadline if
// [WithDeadline] gives one, and a draw from Policy.Rand:
//
//   - a retryable error: the job is scheduled at the time Next gives: the
//     jittered backoff, and never earlier than a delay the server asked for
//     ([retry.RetryAfter], a [*retry.ResponseError] from
//     [retry.CheckResponse]); River stores the error with the attempt;
//   - an error marked [retry.Permanent] or classified Stop, a server delay
//     above Policy.MaxRetryAfter ([retry.ErrServerDelay]), a retry that could
//     not start before the job's deadline ([retry.ErrNoTimeLeft]), or a
//     Budget that refuses the retry ([retry.ErrBudgetExhausted]): the job is
//     cancelled at once (state cancelled), its error recorded as a
//     [*retry.Error] that names the reason and keeps the worker's error;
//   - the error of the last attempt allowed ([retry.ErrExhausted]): River
//     discards the job (state discarded), which is the dead-letter record:
//     River keeps every attempt's error in the job's errors column.
//
// Errors that are River's to handle pass through untouched: [river.JobSnooze]
// and [river.JobCancel] returned by the worker, and any error after River
// ended the job's context (the client stopping, the job cancelled
// remotely), whose attempt is marked outcome-unknown first. A worker that
// uses retry.Do itself returns a [*retry.Error], which the default
// classifier stops on (retry at one layer: see [retry.DefaultClassifier]).
//
// # How the decision reaches River
//
// River asks its ClientRetryPolicy for the next attempt's time after the
// attempt, but passes it only the job row, whose errors do not yet include
// this attempt's error, so a retry policy alone cannot classify the error or
// read a server's delay. A worker middleware sees the typed error but cannot
// set the time. So the [Middleware] is both: its Work method decides and
// leaves the time in a map keyed by job ID and attempt number; its
// NextRetry method, which River's executor calls next in the same process
// for the same job and attempt, takes it from there. When Work made no
// decision (the worker panicked, River's rescuer is retrying a job whose
// worker process died) NextRetry applies the policy's backoff to the attempt
// number. Stops need no hand-over: Work returns river.JobCancel, or leaves
// the last attempt's error to River's own discard.
//
// # Attempts, budget, limiter, deadline
//
// River's max_attempts is the policy's MaxAttempts ([Middleware.MaxAttempts]:
// 0 means 4, negative means 32767, the most River stores), stamped on each
// job by the client that inserts it. A job inserted with its own
// MaxAttempts keeps it, and the middleware decides with the job's value, so
// River and the policy always agree on the last attempt.
//
// The policy's Budget and Limiter, if any, count the attempts of the worker
// process that runs the middleware: the Budget gets one deposit per job, at
// its first attempt (a snooze or a client stop gives the job its attempt
// number back, and a flag in its metadata keeps that run from depositing
// again), and pays for each retry; the Limiter paces every attempt,
// retries included: a job waits for its token on a timer before its worker
// runs, holding its worker slot (so MaxWorkers bounds how many wait). Each
// process has its own, unless it is shared by the fleet (package fleet,
// through retrypg or retryredis); a shared one that fails closed while its
// store is down makes the job wait a second, snoozed (no attempt counted),
// rather than cancelling it. A job that waits for the Limiter is running in River's eyes: keep River's
// RescueStuckJobsAfter above the longest wait plus AttemptTimeout (see
// [Middleware.Config]). Policy.AttemptTimeout bounds each attempt's
// context, and is River's JobTimeout too. [WithDeadline] gives each job a
// deadline: no attempt starts after it, and a retry that could not start
// before it is not scheduled (a retry without a decision, after a panic or
// a rescue, waits for the deadline and is then cancelled).
//
// # Concurrency limits and circuit breakers
//
// Each attempt is admitted through [retry.Policy.Admit]: the Limiter's
// turn, a slot of the policy's Concurrency, then its Breaker. The slot is
// given back as soon as the worker returns or panics, with the attempt's
// error for the Breaker to judge as the core's loop would (a worker's own
// snooze or cancel, a panic, an attempt River cut off count for nothing). A
// job they refuse is snoozed, its attempt not counted, and marked with
// [MetadataHeld] until it is let through: for a jittered 0.5-1s when it
// found no slot ([retry.ErrNoSlot]), until the breaker may let an attempt
// through when it is open ([retry.ErrBreakerOpen]), for a second when a
// shared store is down. A job whose deadline that wait would pass is
// cancelled with the reason instead. [OldestWaiting] reports, per queue
// and kind, the oldest job waiting for a retry or for these bounds.
//
// # Outcome unknown, and reconciliation
//
// An attempt may have taken effect although it failed when its outcome is
// unknown ([retry.OutcomeUnknown]: a timeout, a connection broken after the
// request was sent), when River cut it off (the job cancelled remotely, a
// client stopping with StopAndCancel or its SoftStopTimeout), when its
// worker panicked, and when it never reported its end (its worker process
// died, or River's rescuer took the job back from a worker that hung). The
// middleware lists such attempts in the job's metadata under
// [MetadataOutcomeUnknown]: at once for the first three; for the last, when
// the job's next attempt starts, before anything can end it. An attempt
// River failed before any worker ran (a client that does not know the
// job's kind, as in a rolling deploy) is not listed: nothing ran.
//
// The jobs that stopped (cancelled or discarded) after such an attempt need
// reconciling before their work is done again by other means; one query
// finds them. A job can stop after a rescue with no attempt of the
// middleware's after it (cancelled while it waited, or discarded by the
// rescuer at its last attempt), so the query also looks for the rescuer's
// error. On PostgreSQL:
//
//	SELECT id, kind, args, state, metadata->'retry_outcome_unknown' AS unknown_attempts, errors
//	FROM river_job
//	WHERE state IN ('cancelled', 'discarded')
//	  AND (metadata ? 'retry_outcome_unknown'
//	    OR EXISTS (SELECT 1 FROM unnest(errors) AS e WHERE e->>'error' = 'Stuck job rescued by JobRescuer'));
//
// On SQLite:
//
//	SELECT id, kind, json(args) AS args, state, json_extract(metadata, '$.retry_outcome_unknown') AS unknown_attempts, json(errors) AS errors
//	FROM river_job
//	WHERE state IN ('cancelled', 'discarded')
//	  AND (json_extract(metadata, '$.retry_outcome_unknown') IS NOT NULL
//	    OR EXISTS (SELECT 1 FROM json_each(errors) WHERE json_extract(value, '$.error') = 'Stuck job rescued by JobRescuer'));
//
// Without the state condition the query also finds completed jobs that may
// have done their work twice (harmless with an idempotency key). The
// middleware also records [MetadataStop] (why the policy stopped the job),
// [MetadataWait] and [MetadataAttempt], and retry_deposited (the job's
// Budget deposit is made).
package retryriver
