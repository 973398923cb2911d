package retry

import (
	"context"
	"time"
)

// runCall runs one call: its attempts one at a time, on the caller's goroutine,
// with the scheduler's decisions between them (see schedule.go). It returns
// the number of the attempt that won, or the call's error.
//
// c holds the call's Policy, and nothing else yet: it lives on the stack of
// Do, since a Policy that escaped would cost every call an allocation. h is
// the call's hedging, nil when the Policy does not hedge: fn then does
// not escape, and the call keeps all of its state on the stack. With h, each
// attempt runs with its first hedge armed beside it (hedgedCall.runInline), and c is
// h's own; when no
// hedge comes due before the attempt ends, the call goes on here as any
// other does, and once one does, the attempts in flight are hedge.go's, and
// runCall waits for their outcome.
func runCall(ctx context.Context, c *callState, fn func(context.Context) error, h *hedgedCall) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	p := &c.p
	c.ctx, c.observe = ctx, p.Observe
	// clockless: nothing of the call reads the time after a failed attempt
	// but the rules against the deadline, and it has none: no Observe,
	// Budget, Limiter, bound or AttemptTimeout, no hedging. A retry at once
	// then needs no clock reading at all, which is most of what it costs,
	// and the start is read from the monotonic clock alone.
	bounded := p.Concurrency != nil || p.Breaker != nil
	quiet := h == nil && c.observe == nil && p.Budget == nil &&
		p.Limiter == nil && p.AttemptTimeout <= 0 && !bounded
	now, err := c.begin(fn, quiet)
	if err != nil {
		return 0, err
	}
	clockless := c.clockless

	fctx := ctx // the context fn runs on
	var num *numberedCtx
	var learn, hedgeLearn attemptLearner
	if p.Limiter != nil {
		learn = learnerOf(p.Limiter)
	}
	if h != nil {
		c.initHedging(&h.plan)
		hedgeLearn = learnerOf(p.HedgeDelay)
	} else if p.AttemptInContext {
		num = &numberedCtx{Context: ctx}
		fctx = num
	}
	for {
		c.attempts++
		n := c.attempts
		began := now
		var err error
		switch {
		case h != nil:
			c.markStarted(now, false)
			var handed bool
			if err, handed = h.runInline(n, now); handed {
				return h.await()
			}
		case c.b.held():
			err = c.boundAttempt(fctx, num, n, now, fn)
		case p.AttemptTimeout > 0:
			if num != nil {
				num.n.Store(int64(n))
			}
			err = attemptWithTimeout(fctx, now, p.AttemptTimeout, c.deadline, fn)
		default:
			if num != nil {
				num.n.Store(int64(n))
			}
			err = fn(fctx) // the common case, without a call to set up
		}
		if learn != nil || hedgeLearn != nil {
			now = time.Now()
			for _, l := range [...]attemptLearner{hedgeLearn, learn} {
				if l != nil {
					l.Learn(now.Sub(began), err)
				}
			}
		}
		if err == nil {
			if c.b.held() {
				end := began
				if !c.b.early {
					now = time.Now()
					end = now
				}
				c.b.settle(began, end, nil)
			}
			if c.observe == nil {
				return n, nil
			}
			now = time.Now()
			c.observeAttempt(n, began, now, nil, false, retryStep{}, false)
			return c.endCall(now, nil)
		}
		var at time.Time
		var r Reservation
		if h == nil {
			// The rules land applies, for a call with one attempt in flight
			// ever, with no call to make when nothing but the wait follows
			// the decision. A call that reads no time but its deadline's
			// judges a failure without a clock reading when it has no
			// deadline (see clockless), and reads the clock once a wait is
			// due or the call stops.
			if !clockless {
				now = time.Now()
			}
			s, _, unknown, reason := c.judgeFailure(err, now)
			if c.b.held() {
				c.b.settle(began, now, health(err, c.counts))
			}
			if reason != nil {
				if clockless {
					now = time.Now() // for Error.Elapsed
				}
				c.observeAttempt(n, began, now, c.last, unknown, retryStep{server: s.server}, false)
				return c.endCall(now, reason)
			}
			c.prev = s.wait
			if clockless && s.wait > 0 {
				now = time.Now()
			}
			at = now.Add(s.wait)
			if p.Limiter != nil || p.Budget != nil || c.observe != nil || p.Breaker != nil {
				v := c.admitRetry(n, began, now, false, unknown, s, now, at)
				if v.done {
					return c.endCall(v.at, v.reason)
				}
				at, r = v.at, v.r
			}
		} else {
			now = time.Now()
			v := c.landAttempt(n, began, now, now, false, err)
			if c.b.held() {
				c.b.settle(began, now, health(err, c.counts))
			}
			if v.done {
				return c.endCall(v.at, v.reason)
			}
			at, r = v.at, v.r
		}
		// Without hooks of the user's (Observe, a Classifier, the Budget,
		// Rand) or a Limiter, nothing between the reading of the clock after
		// an attempt and a retry at once can take time worth charging to
		// anyone, so that retry starts on that reading, and readyToStart's rule is
		// checked on it; with any of them, it reads the clock again, so
		// that their time is not charged to the next attempt.
		after := now
		if c.observe != nil || p.Classifier != nil || p.Budget != nil || p.Rand != nil || p.Limiter != nil || bounded {
			after = time.Time{}
		} else if !at.After(now) {
			if reason := readyToStart(ctx, p, now, c.deadline); reason != nil {
				return c.endCall(now, reason)
			}
			continue
		}
		var reason error
		if now, reason = c.waitForNext(&r, at, after); reason != nil {
			return c.endCall(now, reason)
		}
		if bounded {
			if now, reason = c.takeBounds(&r, now, false); reason != nil {
				return c.endCall(now, reason)
			}
		}
	}
}

// boundAttempt runs attempt n, which starts at now, for a call whose attempt
// holds a slot or a breaker's leave (c.b), and gives them back if fn
// panics; otherwise the caller gives them back once it has judged the end.
func (c *callState) boundAttempt(ctx context.Context, num *numberedCtx, n int, now time.Time, fn func(context.Context) error) (err error) {
	if num != nil {
		num.n.Store(int64(n))
	}
	ok := false
	defer func() {
		if !ok {
			c.b.settle(now, time.Now(), errNoNews)
		}
	}()
	if c.p.AttemptTimeout > 0 {
		err = attemptWithTimeout(ctx, now, c.p.AttemptTimeout, c.deadline, fn)
	} else {
		err = fn(ctx)
	}
	ok = true
	return err
}

// attemptWithTimeout runs fn once, on a context bounded by timeout. The cancel is
// deferred so that a panic in fn leaves no timer running.
func attemptWithTimeout(ctx context.Context, now time.Time, timeout time.Duration, deadline time.Time, fn func(context.Context) error) error {
	actx, cancel := attemptContext(ctx, now, timeout, deadline)
	if cancel == nil {
		return fn(ctx)
	}
	defer cancel()
	return fn(actx)
}
