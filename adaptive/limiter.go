package adaptive

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
)

// The constants of the Limiter's rate control; see the package doc for why
// each has its value.
const (
	// cut is the rate after a throttle, as a fraction of the peak: CUBIC's
	// beta. TCP CUBIC (RFC 9438) and AWS's adaptive retry mode take 0.7 of
	// the rate that met the throttle; here the peak is measured, the
	// successes of a saturated second, so less margin will do: at 0.85 the
	// tests' providers are kept 96% busy, against 93% at 0.7, with as few
	// throttles.
	cut = 0.85

	// probeCubic is the cubic's coefficient beyond the peak, TCP CUBIC's
	// C, here relative to the peak: twice the peak 1.36 regrowths after
	// reaching it.
	probeCubic = 0.4

	// regrowth is the time, with successes, from a cut back to the peak.
	// CUBIC's K, here the same at every rate: the curve is scaled by the
	// peak, so a provider of 10 or of 10,000 requests a second is found
	// again as fast.
	regrowth = 3 * time.Second

	// hold is the least time between two cuts: a provider that counts per
	// second keeps refusing for the rest of its window whatever the client
	// does, and that is no news about the new rate.
	hold = time.Second

	// probe bounds the rate beyond the peak to that many times the answers
	// of the last second, which tell of attempts booked a queue's length
	// ago: so the rate rises by at most a fifth for each round of news, and
	// does not grow while the Limiter is idle. Once the answers are three
	// times the peak, the provider has plainly grown (or the peak was
	// measured while the client sent little), and the rate may double for
	// each round, as TCP's slow start does.
	probe     = 1.2
	fastProbe = 2.0

	// slack is the least Slack of a booking that waits: an attempt woken
	// later than that books again. A stalled process then releases at most
	// rate*slack attempts at once, 2% of a second's worth.
	slack = 20 * time.Millisecond

	// bucket is the length of the counters the rates are measured with.
	bucket = time.Second

	defaultMinRate = 1.0
	leastMinRate   = 1e-3 // a slot at most 1000s after the last one
)

// Limiter is a [retry.Limiter] that needs no configured rate: it learns how
// many attempts a second its provider accepts from the provider's own
// answers, and paces every attempt of every call that shares it at that
// rate. Until the first throttling answer it books every attempt at once;
// from then on it paces, lowers its rate once for each episode of
// throttling, to 0.85 of what the provider accepted, and with successes
// raises it again along a cubic curve that comes back to that rate and then
// probes above it, so that it follows a provider whose capacity grows.
// Which answers are throttling ones, and how the rate moves, is in the
// package doc.
//
// Put one Limiter in the [retry.Policy] of every call to one provider:
//
//	lim := &adaptive.Limiter{}
//	policy := retry.Policy{Limiter: lim, Budget: retry.NewBudget(0.1, 1)}
//
// The loop tells it how each attempt it paced ended, through Learn. A
// booking never waits: Reserve says when the attempt may start, and the
// loop waits, counting that wait against the caller's deadline, and gives
// the booking back when the attempt will not fit.
//
// The zero value is ready to use, with a MinRate of 1. A Limiter is safe for
// concurrent use by any number of goroutines; do not copy it once used, nor
// change MinRate. It reads the clock only in Reserve and Learn; ReserveAt
// and LearnAt take the time instead, for a simulation in virtual time.
type Limiter struct {
	// MinRate is the fewest attempts per second the Limiter ever paces at,
	// however many throttling answers it gets, so that it keeps learning.
	// 0 (or a negative or NaN value) means 1; a positive value below 0.001
	// counts as 0.001.
	MinRate float64

	// The answers learned, counted without the lock, so that a success costs
	// one atomic add; the locked methods read them.
	successes atomic.Uint64
	others    atomic.Uint64 // errors that are not throttling answers (timeouts included)
	throttles atomic.Uint64
	sent      atomic.Uint64 // bookings

	// free is set, under the lock, by the first booking, and cleared by the
	// first throttle: until then a booking is the current time, and takes
	// no lock.
	free atomic.Bool

	mu sync.Mutex
	s  state
}

// state is the Limiter's state, guarded by its mutex. Times are offsets from
// origin, the first time the Limiter was given, so that arithmetic on them
// is on plain integers.
type state struct {
	origin  time.Time
	started bool
	last    time.Duration // the latest time given; an earlier one counts as it

	limited bool    // a throttle has been learned: bookings are paced
	rate    float64 // attempts per second, as of the last booking or cut
	peak    float64 // the rate that was throttled at the last cut (CUBIC's W_max)

	// Growth: the time since the last cut during which successes came in.
	grown  time.Duration
	grewAt time.Duration
	seen   uint64 // successes, as of grewAt

	book    schedule
	queue   time.Duration // how much later than planned the last booking starts
	recover time.Duration // a throttle of an attempt started before it causes no cut

	// Per-second counters of answers: those in the current bucket (from the
	// counts marked at its start) and in the one before.
	bucket       int64
	acceptedMark uint64 // successes at the bucket's start
	answeredMark uint64 // all answers at the bucket's start
	sentMark     uint64 // bookings at the bucket's start
	acceptedPrev float64
	answeredPrev float64
	sentPrev     float64
}

// Reserve books one attempt planned for t (the current time, or a retry's
// end of backoff), at the current time read under the Limiter's lock. It is
// shorthand for ReserveAt(time.Now(), t), and never returns an error. ctx is
// not used: Reserve never waits.
func (l *Limiter) Reserve(ctx context.Context, t time.Time) (retry.Reservation, error) {
	if l.free.Load() {
		l.sent.Add(1)
		return retry.Reservation{Start: time.Now(), Handle: l}, nil
	}
	var deadline time.Time
	if ctx != nil {
		deadline, _ = ctx.Deadline()
	}
	l.mu.Lock()
	// The time is read under the lock, so that no booking is made at a
	// time older than one already made.
	r := l.reserve(time.Now(), t, deadline)
	l.mu.Unlock()
	return r, nil
}

// ReserveAt books, at now, one attempt planned for t (a t before now counts
// as now), and returns the booking. While the Limiter has learned no
// throttle its Start is now. After, it is the first free slot at or after
// t, slots being one over the rate apart: so a retry waits for its backoff
// or for the server's delay, and then only for a free slot, as the other
// attempts do, never for both one after the other. A booking that waits
// beyond t has a Slack of one slot, and at least 20ms. Times must not go
// back: a now earlier than one the Limiter has been given counts as that
// one, and a zero now is the current time. It is the form for a
// simulation, which passes its virtual time; give the booking back with
// Cancel.
func (l *Limiter) ReserveAt(now, t time.Time) retry.Reservation {
	l.mu.Lock()
	r := l.reserve(now, t, time.Time{})
	l.mu.Unlock()
	return r
}

// reserve books an attempt planned for planned, at now. A booking whose
// start is not before deadline (zero: none) is not kept: the loop will give
// it back at once, and under a long queue, bookings that could never start
// would otherwise take slots from those that can.
func (l *Limiter) reserve(now, planned, deadline time.Time) retry.Reservation {
	s := &l.s
	t := s.at(now)
	l.sent.Add(1)
	l.roll(t)
	if !s.limited {
		l.free.Store(true)
		return retry.Reservation{Start: s.time(t), Handle: l}
	}
	want := max(t, planned.Sub(s.origin))
	s.grow(t, l.successes.Load())
	slot := s.slot(l.pace(t))
	start := s.book.book(t, want, slot)
	if !deadline.IsZero() && !s.time(start).Before(deadline) {
		s.book.cancel(t, start)
		return retry.Reservation{Start: s.time(start)}
	}
	s.queue = start - want
	r := retry.Reservation{Start: s.time(start), Handle: l}
	if start > want {
		r.Slack = max(slack, slot)
	}
	return r
}

// Cancel gives back r, a booking whose attempt will not start. Its slot is
// freed when no booking was made after it (the loop gives a booking back
// at once when the Budget refuses its retry or it would not fit before the
// deadline); otherwise the slot passes unused, which errs on the provider's
// side. A booking of another Limiter is ignored. Cancel reads no clock.
func (l *Limiter) Cancel(r retry.Reservation) {
	if h, ok := r.Handle.(*Limiter); !ok || h != l {
		return
	}
	l.mu.Lock()
	if s := &l.s; s.limited {
		s.book.cancel(s.last, r.Start.Sub(s.origin))
	}
	l.mu.Unlock()
}

// Learn is told how an attempt the Limiter paced ended: its duration d and
// its error, nil for a success. It is shorthand for LearnAt(time.Now(), d,
// err), except that a success reads no clock and takes no lock: it costs one
// atomic add.
func (l *Limiter) Learn(d time.Duration, err error) {
	if err == nil {
		l.successes.Add(1)
		return
	}
	l.learn(time.Time{}, d, err)
}

// LearnAt is Learn at the time now, for a simulation: an attempt that
// started at now-d ended at now with err (nil: success). A throttling
// answer (see the package doc) lowers the rate, unless the attempt started
// before the last cut's effect could be seen (before the attempts booked at
// the old rate had all started, before the server's delay had passed, or
// less than a second after the cut), or the provider accepted, over the
// last second, at least the current rate. Another error changes nothing but
// the measured rates. A negative d counts as 0, and a zero now is the
// current time.
func (l *Limiter) LearnAt(now time.Time, d time.Duration, err error) {
	if err == nil {
		l.successes.Add(1)
		return
	}
	l.learn(now, d, err)
}

func (l *Limiter) learn(now time.Time, d time.Duration, err error) {
	if !throttled(err) {
		l.others.Add(1)
		return
	}
	l.throttles.Add(1)
	delay := serverDelay(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.s
	t := s.at(now)
	l.roll(t)
	limited := s.limited
	if limited && t-max(d, 0) < s.recover {
		return // booked at the old rate, or the provider's window had not turned
	}
	s.grow(t, l.successes.Load())
	answered := perSecond(t, l.answered(), s.answeredMark, s.answeredPrev)
	accepted := perSecond(t, l.accepted(), s.acceptedMark, s.acceptedPrev)
	var base float64 // the rate the attempts were sent at
	if limited {
		pace := l.pace(t)
		if accepted >= pace {
			// The provider accepted the current pace over the last second:
			// the attempts it refused came from bookings made faster.
			return
		}
		base = min(pace, answered)
	} else {
		// Sent at once: the bookings of the last second were the attempts.
		base = max(answered, perSecond(t, l.sent.Load(), s.sentMark, s.sentPrev))
	}
	// The successes of the last second measure the capacity when the
	// provider was saturated. Before a second has been measured, or when
	// none came in (a provider closed until its quota resets), the rate
	// sent stands in for it, and the next cut, a second on at the
	// earliest, measures.
	peak := base
	if accepted > 0 && t >= bucket {
		peak = min(base, accepted)
	}
	s.peak = max(peak, l.minRate())
	s.rate = max(cut*s.peak, l.minRate())
	s.grown, s.grewAt, s.seen = 0, t, l.successes.Load()
	if !limited {
		s.book = newSchedule(t)
		s.limited = true
		l.free.Store(false)
	}
	s.recover = max(s.book.next, t+delay, t+hold)
}

// Rate returns the rate, in attempts per second, at which the Limiter paced
// its last booking or set at its last cut; 0 until it has learned a throttle
// (it then books every attempt at once).
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.s.limited {
		return 0
	}
	return l.s.rate
}

func (l *Limiter) minRate() float64 {
	switch m := l.MinRate; {
	case !(m > 0):
		return defaultMinRate
	case m < leastMinRate:
		return leastMinRate
	default:
		return m
	}
}

// accepted counts the successes: the attempts the provider surely served.
// An error that is not a throttle may have been served (a 500) or not (a
// timeout, an attempt whose deadline came before its answer), so the
// capacity is measured by successes alone: a lower bound.
func (l *Limiter) accepted() uint64 { return l.successes.Load() }

// answered counts every attempt learned: the rate sent.
func (l *Limiter) answered() uint64 {
	return l.successes.Load() + l.others.Load() + l.throttles.Load()
}

// pace returns the rate for a booking at t: the cubic curve through the
// peak, no more than probe (or fastProbe) times the answers of the last
// second unless that is below the peak, and no less than MinRate.
//
// The curve is peak*(1 + a*x^3), x = g/k - 1, g the growth time since the
// cut: from cut*peak at the cut (a = 1-cut) back to the peak at g = k, flat
// around it, then rising beyond it (a = probeCubic), faster and faster.
func (l *Limiter) pace(t time.Duration) float64 {
	s := &l.s
	// A booking made now starts after the queue ahead of it, so news of
	// its rate comes back that much later: the curve is stretched to twice
	// the queue, so that the rate stays within a few percent of the peak
	// until that news comes.
	k := max(regrowth, 2*s.queue)
	x := float64(s.grown)/float64(k) - 1
	a := 1 - cut
	if x > 0 {
		a = probeCubic
	}
	w := s.peak * (1 + a*x*x*x)
	answered := perSecond(t, l.answered(), s.answeredMark, s.answeredPrev)
	p := probe
	if answered >= 3*s.peak {
		p = fastProbe
	}
	w = min(w, max(p*answered, s.peak))
	s.rate = max(w, l.minRate())
	return s.rate
}

// slot returns the time between two bookings at rate.
func (s *state) slot(rate float64) time.Duration {
	return time.Duration(math.Min(float64(time.Second)/rate, float64(math.MaxInt64/4)))
}

// grow counts the time since successes were last seen as growth, when
// successes came in meanwhile, but at most a second of it: the rate rises
// only while the provider accepts attempts, not across an outage.
func (s *state) grow(t time.Duration, successes uint64) {
	if successes == s.seen {
		return
	}
	s.grown += min(t-s.grewAt, bucket)
	s.grewAt, s.seen = t, successes
}

// roll moves the per-second counters to t's bucket. When buckets were
// skipped (no locked call came in them: an idle Limiter, or one that books
// without the lock), the previous bucket counts the average of the skipped
// ones.
func (l *Limiter) roll(t time.Duration) {
	s := &l.s
	k := int64(t / bucket)
	if k == s.bucket {
		return
	}
	accepted, answered, sent := l.accepted(), l.answered(), l.sent.Load()
	n := float64(k - s.bucket)
	s.acceptedPrev = float64(accepted-s.acceptedMark) / n
	s.answeredPrev = float64(answered-s.answeredMark) / n
	s.sentPrev = float64(sent-s.sentMark) / n
	s.acceptedMark, s.answeredMark, s.sentMark, s.bucket = accepted, answered, sent, k
}

// perSecond measures the count of the last second: that of the last whole
// bucket, or of the current one so far if it is already more. (A sliding
// estimate, which weighs the last bucket by how much of it the last second
// covers, would take the successes a provider packs in the start of its
// window twice, and measure more than it accepts.) In the first second of
// the Limiter's life, it is the count so far over the time so far (at
// least 1ms), so that the first cut, which often comes within milliseconds
// of the first attempts, measures their rate and not their number.
func perSecond(t time.Duration, count, mark uint64, prev float64) float64 {
	if t < bucket {
		return float64(count-mark) / max(t, time.Millisecond).Seconds()
	}
	return max(prev, float64(count-mark))
}

// at returns now as an offset from the origin, never earlier than the
// latest one; a zero now is the current time.
func (s *state) at(now time.Time) time.Duration {
	if now.IsZero() {
		now = time.Now()
	}
	if !s.started {
		s.origin, s.started = now, true
	}
	s.last = max(s.last, now.Sub(s.origin))
	return s.last
}

func (s *state) time(t time.Duration) time.Time { return s.origin.Add(t) }
