package hedging

import (
	"math"
	"time"

	"github.com/seed93a044d1/retry"
)

// Tail is a latency distribution with a heavy tail: every attempt needs a
// time drawn uniformly from [WorkMin, WorkMax] of a server's worker, and a
// fraction Slow of them first stall for a time drawn uniformly from
// [StallMin, StallMax], waiting on something that holds no worker (a disk,
// a lock held elsewhere, a remote call). It is a plain value.
type Tail struct {
	WorkMin, WorkMax   time.Duration
	StallMin, StallMax time.Duration
	Slow               float64
}

// StudyTail is the hedging study's server: each attempt takes 4 to 6 ms
// of work, and 2% of them stall 0.9 to 1.1 s first, the shape of the
// BigTable reads in "The Tail at Scale".
var StudyTail = Tail{
	WorkMin: 4 * time.Millisecond, WorkMax: 6 * time.Millisecond,
	StallMin: 900 * time.Millisecond, StallMax: 1100 * time.Millisecond,
	Slow: 0.02,
}

// Draw returns the stall (0 for most) and the work of attempt n of call i
// under seed: the same in every variant of a run, so that variants differ
// by their policy only (common random numbers), and the same as the core's
// test draws. The draws come from a hash of the three (SplitMix64's
// finaliser), so no sequence of draws is shared between calls.
func (t Tail) Draw(seed uint64, i, n int) (stall, work time.Duration) {
	x := mix(seed ^ mix(uint64(i)<<20^uint64(n)))
	y := mix(x ^ 0x9e3779b97f4a7c15)
	z := mix(y ^ 0x9e3779b97f4a7c15)
	work = t.WorkMin + time.Duration(unitOf(y)*float64(t.WorkMax-t.WorkMin))
	if unitOf(x) < t.Slow {
		stall = t.StallMin + time.Duration(unitOf(z)*float64(t.StallMax-t.StallMin))
	}
	return stall, work
}

// At returns the latency of attempt n of call i on an idle server: its
// stall and its work.
func (t Tail) At(seed uint64, i, n int) time.Duration {
	stall, work := t.Draw(seed, i, n)
	return stall + work
}

// MeanWork returns the mean work of an attempt.
func (t Tail) MeanWork() time.Duration { return (t.WorkMin + t.WorkMax) / 2 }

func unitOf(x uint64) float64 { return float64(x>>11) / (1 << 53) }

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Server is the hedging study's server. An attempt that arrives
// first stalls, if its draw from Latency says so (holding no worker), then
// takes a worker for its work; when all Workers are busy it waits in a
// queue, first come first served, and the wait adds to its latency; when
// Queue attempts wait already, the server answers 503 at once (it sheds).
// Requests and answers take no time on the wire. A client's cancellation
// reaches the server CancelDelay after the client cancelled (an HTTP/2
// RST_STREAM, a gRPC cancel): a stalled attempt then never takes a worker,
// a waiting one leaves the queue, one in service stops and frees its
// worker. Until then a loser is load like any attempt.
type Server struct {
	Workers int // 0: no limit (no queue, no shedding)
	Queue   int // negative: no limit
	Latency Tail
	// CancelDelay is the time a cancellation takes to reach the server;
	// negative: it never does, and every attempt is served to its end.
	CancelDelay time.Duration
}

// Capacity returns the attempts a second the server's workers serve when
// busy: Workers over the mean work; +Inf with no limit.
func (s Server) Capacity() float64 {
	if s.Workers <= 0 {
		return math.Inf(1)
	}
	return float64(s.Workers) / s.Latency.MeanWork().Seconds()
}

// The states of an attempt at the server.
const (
	sStalled uint8 = iota
	sQueued
	sServing
	sDone
	sCancelled
	sShed
)

type sattempt struct {
	call, n int32
	state   uint8
	began   time.Duration // its work's start
	work    time.Duration
}

// serverState is the server's state in one run.
type serverState struct {
	cfg      Server
	seed     uint64
	answer   func(i, n int) (time.Duration, error)
	attempts []sattempt
	busy     int
	queue    []int32 // ids, oldest first; cancelled ones are skipped
	head     int
	queued   int // waiting, not cancelled
}

// errShed is the server's answer when its queue is full.
var errShed = &retry.ResponseError{StatusCode: 503, Status: "503 Service Unavailable"}

// send receives attempt n of call i at now and returns its id.
func (s *serverState) send(r *hedgeRun, i, n int, now time.Duration) int32 {
	id := int32(len(s.attempts))
	if s.answer != nil {
		d, err := s.answer(i, n)
		s.attempts = append(s.attempts, sattempt{call: int32(i), n: int32(n), state: sServing, began: now, work: d})
		r.res.Served++
		r.q.Schedule(now+d, hedgeEvent{kind: hServiceDone, id: id, err: err})
		return id
	}
	stall, work := s.cfg.Latency.Draw(s.seed, i, n)
	s.attempts = append(s.attempts, sattempt{call: int32(i), n: int32(n), work: work})
	if stall > 0 {
		r.q.Schedule(now+stall, hedgeEvent{kind: hStallDone, id: id})
		return id
	}
	s.admit(r, id, now)
	return id
}

// admit gives attempt id, done stalling, a worker, a place in the queue,
// or a 503.
func (s *serverState) admit(r *hedgeRun, id int32, now time.Duration) {
	a := &s.attempts[id]
	if a.state != sStalled {
		return // cancelled while it stalled
	}
	switch {
	case s.cfg.Workers <= 0 || s.busy < s.cfg.Workers:
		s.serve(r, id, now)
	case s.cfg.Queue < 0 || s.queued < s.cfg.Queue:
		a.state = sQueued
		s.queue = append(s.queue, id)
		s.queued++
		r.res.Queued++
	default:
		a.state = sShed
		r.res.Shed++
		// An event, not a call: send admits during the client's launch,
		// before the attempt is in flight.
		r.q.Schedule(now, hedgeEvent{kind: hAnswer, call: a.call, n: a.n, err: errShed})
	}
}

// serve starts attempt id's work at now.
func (s *serverState) serve(r *hedgeRun, id int32, now time.Duration) {
	a := &s.attempts[id]
	a.state, a.began = sServing, now
	s.busy++
	r.res.Served++
	r.q.Schedule(now+a.work, hedgeEvent{kind: hServiceDone, id: id})
}

// done ends attempt id's work, serves the next in the queue, and answers.
func (s *serverState) done(r *hedgeRun, id int32, now time.Duration, err error) {
	a := &s.attempts[id]
	if a.state != sServing {
		return // cancelled before its end
	}
	a.state = sDone
	r.res.Work += a.work
	if s.answer == nil {
		s.busy--
		s.next(r, now)
	}
	r.land(int(a.call), int(a.n), now, err)
}

// next serves the oldest waiting attempts while a worker is free.
func (s *serverState) next(r *hedgeRun, now time.Duration) {
	for s.head < len(s.queue) && s.busy < s.cfg.Workers {
		id := s.queue[s.head]
		s.head++
		if s.attempts[id].state != sQueued {
			continue
		}
		s.queued--
		s.serve(r, id, now)
	}
	if s.head > 1024 && s.head*2 > len(s.queue) {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		s.head = 0
	}
}

// cancel is the client's cancellation of attempt id at now, which reaches
// the server CancelDelay later, or never.
func (s *serverState) cancel(r *hedgeRun, id int32, now time.Duration) {
	if s.cfg.CancelDelay < 0 {
		return
	}
	r.q.Schedule(now+s.cfg.CancelDelay, hedgeEvent{kind: hCancelArrive, id: id})
}

// cancelled is a cancellation reaching the server at now: a stalled
// attempt will take no worker, a waiting one leaves the queue, one in
// service stops.
func (s *serverState) cancelled(r *hedgeRun, id int32, now time.Duration) {
	a := &s.attempts[id]
	switch a.state {
	case sStalled:
		a.state = sCancelled
	case sQueued:
		a.state = sCancelled
		s.queued--
		r.res.Dropped++
	case sServing:
		a.state = sCancelled
		r.res.Work += now - a.began
		if s.answer == nil {
			s.busy--
			s.next(r, now)
		}
	}
}
