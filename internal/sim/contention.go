package sim

import (
	"cmp"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed93a044d1/retry"
)

// The contention study reproduces the model of aws-samples/aws-arch-backoff-simulator,
// the program behind Marc Brooker's "Exponential Backoff And Jitter" (AWS
// Architecture Blog, 2015):
//
//   - One server holds a row with a version number. N clients start at time 0;
//     each sends a read, gets the version, then sends a write conditional on
//     it. The write succeeds only if the version is unchanged, and then bumps
//     it; otherwise the client backs off and starts again with a read. A client
//     stops after its first successful write. The server answers at once and
//     has no capacity limit.
//   - Every one-way message takes |Normal(10ms, 2ms)|, drawn afresh, so an
//     attempt is four messages. After a failed write's response reaches the
//     client at time t, its next read reaches the server at t + one message
//     delay + the backoff.
//   - The backoff before retry n (n = the client's failure count, 1 for the
//     first retry) is, with base 5ms and cap 2s: none, 0; exponential,
//     min(cap, base*2^n), so the first retry waits 2*base; full jitter,
//     U(0, that); equal jitter, half of it plus U(0, the other half);
//     decorrelated, min(cap, U(base, 3*prev)), prev starting at base and
//     carried per client.
//   - A point counts the writes (reads are not counted) and the time until the
//     last client's successful write response arrives, each averaged over the
//     episodes.
//
// Only the server has state that others see, so only the two messages that
// reach it are events: a read arriving (the server reads the version) and a
// write arriving (it compares and bumps). A client does nothing between
// receiving the version and sending its write, or between receiving a
// failure and sending its next read after the backoff, so each response's
// delay is added to the next request's instead of being an event of its
// own. The model is the same, with half the events; the random draws are
// taken in another order than with one event per message, so the numbers
// differ from such a run by sampling noise only.

// Parameters of the contention study, as in the original program.
const (
	StudyBase = 5 * time.Millisecond
	StudyCap  = 2 * time.Second
	netMean   = 10 * time.Millisecond
	netSD     = 2 * time.Millisecond
)

// Strategy is a backoff strategy of the study: its name and the library value
// that implements it.
type Strategy struct {
	Name    string
	Backoff retry.Backoff
}

// Strategies returns the five strategies of the study as the library's own
// Backoff values. The original's exponential ceiling for failure n is
// base*2^n, so its first retry already waits up to 2*base; the library's
// Exponential ceiling is Base*2^(n-1), so Base is 2*StudyBase. Decorrelated
// matches the original as it stands: prev starts at Base, and the wait it
// returns is what the client carries as prev.
func Strategies() []Strategy {
	exp := func(j retry.Jitter) retry.Exponential {
		return retry.Exponential{Base: 2 * StudyBase, Cap: StudyCap, Jitter: j}
	}
	return []Strategy{
		{Name: "exponential", Backoff: exp(retry.NoJitter)},
		{Name: "full jitter", Backoff: exp(retry.FullJitter)},
		{Name: "equal jitter", Backoff: exp(retry.EqualJitter)},
		{Name: "decorrelated", Backoff: retry.Decorrelated{Base: StudyBase, Cap: StudyCap}},
		{Name: "no backoff", Backoff: retry.Constant(0)},
	}
}

// Reference is a published result of the original program: means over 600
// episodes. Time is 0 where only the calls were given.
type Reference struct {
	Strategy string
	Clients  int
	Calls    float64
	Time     time.Duration
}

// References are the reference points quoted in the issue, for N = 100 and
// N = 10.
var References = []Reference{
	{"exponential", 100, 1855, 63200 * time.Millisecond},
	{"full jitter", 100, 796, 4890 * time.Millisecond},
	{"equal jitter", 100, 812, 6650 * time.Millisecond},
	{"decorrelated", 100, 1001, 4580 * time.Millisecond},
	{"no backoff", 100, 2422, 2030 * time.Millisecond},
	{"exponential", 10, 50.2, 0},
	{"full jitter", 10, 38.3, 0},
	{"equal jitter", 10, 42.0, 0},
	{"decorrelated", 10, 37.2, 0},
	{"no backoff", 10, 50.3, 0},
}

// LookupReference returns the published point for a strategy and a client
// count, if there is one.
func LookupReference(strategy string, clients int) (Reference, bool) {
	for _, r := range References {
		if r.Strategy == strategy && r.Clients == clients {
			return r, true
		}
	}
	return Reference{}, false
}

// EpisodeResult is the outcome of one episode of the contention study.
type EpisodeResult struct {
	Calls int           // writes received by the server
	Time  time.Duration // when the last client's successful write response arrived
}

// Kinds of message in the contention model: those that reach the server.
const (
	readRequest  uint8 = iota // a read arrives at the server
	writeRequest              // a conditional write arrives at the server
)

type message struct {
	kind   uint8
	client int32 // the client that sent the request
	value  int64 // the version read, carried by the write
}

// episode is the reusable state of one contention episode.
type episode struct {
	q        Queue[message]
	failures []int
	prev     []time.Duration
}

// Episode runs one episode of the contention study with the given number of
// clients and backoff, taking every random draw from rng.
func Episode(clients int, b retry.Backoff, rng *rand.Rand) EpisodeResult {
	var e episode
	return e.run(clients, b, rng)
}

func (e *episode) run(clients int, b retry.Backoff, rng *rand.Rand) EpisodeResult {
	e.q.Reset()
	e.failures = slices.Grow(e.failures[:0], clients)[:clients]
	e.prev = slices.Grow(e.prev[:0], clients)[:clients]
	clear(e.failures)
	clear(e.prev)
	delay := func() time.Duration {
		return time.Duration(math.Abs(float64(netMean) + float64(netSD)*rng.NormFloat64()))
	}
	for c := range clients {
		e.q.Schedule(delay(), message{kind: readRequest, client: int32(c)})
	}
	var (
		version int64
		res     EpisodeResult
	)
	for {
		m, ok := e.q.Pop()
		if !ok {
			return res
		}
		switch m.kind {
		case readRequest:
			// The version's trip back to the client, then the write's trip
			// to the server.
			toClient := delay()
			e.q.After(toClient+delay(), message{kind: writeRequest, client: m.client, value: version})
		case writeRequest:
			res.Calls++
			toClient := delay() // the write's result on its way back
			if m.value == version {
				version++
				res.Time = max(res.Time, e.q.Now()+toClient)
				continue
			}
			c := m.client
			e.failures[c]++
			wait := b.Delay(e.failures[c], e.prev[c], rng.Float64())
			e.prev[c] = wait
			e.q.After(toClient+delay()+wait, message{kind: readRequest, client: c})
		}
	}
}

// Point is one point of the study: a strategy and a client count, with the
// means (and their standard errors) over the episodes.
type Point struct {
	Strategy string
	Clients  int
	Episodes int
	Calls    float64 // mean writes per episode
	CallsSE  float64 // standard error of Calls
	Time     time.Duration
	TimeSE   time.Duration
}

// seedFor returns the random stream of one episode, a function of the seed,
// the strategy, the client count and the episode number only, so that results
// do not depend on how the work is split or ordered.
func seedFor(seed uint64, strategy string, clients, ep int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(strategy))
	return rand.New(rand.NewPCG(seed^h.Sum64(), uint64(clients)<<32|uint64(ep)))
}

// RunPoint runs the given number of episodes of one strategy at one client
// count and returns the means. Episodes are seeded from seed, the strategy's
// name, clients and the episode's number.
func RunPoint(s Strategy, clients, episodes int, seed uint64) Point {
	var (
		e                        episode
		sumC, sumC2, sumT, sumT2 float64
	)
	for ep := range episodes {
		r := e.run(clients, s.Backoff, seedFor(seed, s.Name, clients, ep))
		c, t := float64(r.Calls), r.Time.Seconds()
		sumC += c
		sumC2 += c * c
		sumT += t
		sumT2 += t * t
	}
	p := Point{Strategy: s.Name, Clients: clients, Episodes: episodes}
	if episodes == 0 {
		return p
	}
	n := float64(episodes)
	meanC, meanT := sumC/n, sumT/n
	p.Calls = meanC
	p.Time = seconds(meanT)
	if episodes > 1 {
		p.CallsSE = math.Sqrt(max(sumC2/n-meanC*meanC, 0) * n / (n - 1) / n)
		p.TimeSE = seconds(math.Sqrt(max(sumT2/n-meanT*meanT, 0) * n / (n - 1) / n))
	}
	return p
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// Sweep runs every strategy at every client count on workers goroutines (at
// least one) and returns the points ordered by strategy (in the order given),
// then by client count. progress, if not nil, is called after each point
// with the number done and the total, from the worker that finished it: it
// must be safe for concurrent use. The points do not depend on workers.
func Sweep(strategies []Strategy, clients []int, episodes int, seed uint64, workers int, progress func(done, total int)) []Point {
	type job struct{ s, c int }
	jobs := make([]job, 0, len(strategies)*len(clients))
	for s := range strategies {
		for c := range clients {
			jobs = append(jobs, job{s, c})
		}
	}
	// Largest first, so that no worker is left with a big point at the end.
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(clients[b.c], clients[a.c]) })
	points := make([]Point, len(jobs))
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				points[j.s*len(clients)+j.c] = RunPoint(strategies[j.s], clients[j.c], episodes, seed)
				if progress != nil {
					progress(int(done.Add(1)), len(jobs))
				}
			}
		}()
	}
	wg.Wait()
	return points
}
