package main

import (
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// provider is the loopback notification service of the drill. Its clock
// starts at the first request it gets, so that the time workers take to
// start does not shift the figures. Its first p.outage requests meet the
// outage: it accepts each and never answers, so the attempt ends at its
// timeout, not knowing whether it took effect. Then it serves at most
// capacity requests per window (windows counted from start) and answers the
// rest 429 with the time until the window resets, as Retry-After (whole
// seconds, rounded up) and retry-after-ms (exact). A served request sends
// the notification (an effect, counted per Idempotency-Key) unless, with
// dedupe, that key's notification was sent before: a duplicate, absorbed
// (answered 200, not sent again). A share lostReplies of served requests
// lose their reply (the client times out).
type provider struct {
	p      params
	dedupe bool
	mu     sync.Mutex
	start  time.Time
	rng    *rand.Rand
	win    int64 // index of the current window
	used   int   // requests served in it
	// What it saw, for the report and the checks.
	arrivals   []time.Duration // since start
	admitted   []time.Time     // when each attempt that said so was admitted (attemptHeader)
	upAt       time.Duration   // when the first request after the outage came
	received   map[string]int  // requests, per key
	down       map[string]int  // requests that met the outage, per key
	effects    map[string]int  // notifications sent, per key
	throttled  int
	lost       int
	duplicates int
	srv        *http.Server
	url        string
}

func newProvider(p params, seed uint64, dedupe bool) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	pr := &provider{p: p, dedupe: dedupe, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		received: make(map[string]int), down: make(map[string]int), effects: make(map[string]int), win: -1}
	pr.srv = &http.Server{Handler: pr, ReadHeaderTimeout: 10 * time.Second}
	pr.url = "http://" + ln.Addr().String() + "/notify"
	go pr.srv.Serve(ln)
	return pr, nil
}

// started returns when the first request came, zero if none has.
func (pr *provider) started() time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.start
}

func (pr *provider) close() { pr.srv.Close() }

func (pr *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	now := time.Now()
	pr.mu.Lock()
	if pr.start.IsZero() {
		pr.start = now
	}
	at := now.Sub(pr.start)
	pr.arrivals = append(pr.arrivals, at)
	if ns, err := strconv.ParseInt(r.Header.Get(attemptHeader), 10, 64); err == nil {
		pr.admitted = append(pr.admitted, time.Unix(0, ns))
	}
	pr.received[key]++
	if len(pr.arrivals) <= pr.p.outage {
		pr.down[key]++
		pr.mu.Unlock()
		<-r.Context().Done() // down: no answer; the client gives up
		return
	}
	if len(pr.arrivals) == pr.p.outage+1 {
		pr.upAt = at
	}
	if win := int64(at / pr.p.window); win != pr.win {
		pr.win, pr.used = win, 0
	}
	if pr.used >= pr.p.capacity {
		pr.throttled++
		left := pr.p.window*time.Duration(pr.win+1) - at
		pr.mu.Unlock()
		w.Header().Set("Retry-After", strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10))
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64((left+time.Millisecond-1)/time.Millisecond), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	pr.used++
	if pr.dedupe && pr.effects[key] > 0 {
		pr.duplicates++
	} else {
		pr.effects[key]++
	}
	lost := pr.rng.Float64() < pr.p.lostReplies
	if lost {
		pr.lost++
	}
	pr.mu.Unlock()
	if lost {
		<-r.Context().Done() // sent, but the reply never arrives
		return
	}
	w.WriteHeader(http.StatusOK)
}

// attemptHeader carries the time (Unix nanoseconds, on the sending
// process's clock, which every process of the machine shares) at which the
// attempt was admitted: when its limiter let it start. Counting admissions
// there rather than arrivals at the provider leaves out the jitter of the
// HTTP round trip on a loaded machine, which is not the limiter's.
const attemptHeader = "X-Attempt-Start"

// stats is what the provider saw.
type stats struct {
	arrivals              []time.Duration // sorted
	admitted              []time.Duration // sorted, on the arrivals' clock: when attempts were admitted, by their own process's clock
	upAt                  time.Duration   // 0 if the outage never ended
	received              map[string]int  // requests, per key
	down                  map[string]int  // requests that met the outage, per key
	effects               map[string]int  // notifications sent, per key
	throttled, lost, dups int
}

func (pr *provider) stats() stats {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	a := slices.Clone(pr.arrivals)
	slices.Sort(a)
	adm := make([]time.Duration, len(pr.admitted))
	for i, t := range pr.admitted {
		adm[i] = t.Sub(pr.start)
	}
	slices.Sort(adm)
	return stats{arrivals: a, admitted: adm, upAt: pr.upAt, received: maps.Clone(pr.received), down: maps.Clone(pr.down), effects: maps.Clone(pr.effects),
		throttled: pr.throttled, lost: pr.lost, dups: pr.duplicates}
}

// sent returns the notifications sent: the keys sent at least once.
func (s stats) sent() int { return len(s.effects) }

// metOutage returns the requests that met the outage.
func (s stats) metOutage() int {
	n := 0
	for _, v := range s.down {
		n += v
	}
	return n
}

// mostSent returns the most times one key's notification was sent, and how
// many keys were sent more than once.
func (s stats) mostSent() (most, repeated int) {
	for _, n := range s.effects {
		most = max(most, n)
		if n > 1 {
			repeated++
		}
	}
	return most, repeated
}

// mostReceived returns the most requests the provider received for one
// key, and how many keys it received more than one request for.
func (s stats) mostReceived() (most, repeated int) {
	for _, n := range s.received {
		most = max(most, n)
		if n > 1 {
			repeated++
		}
	}
	return most, repeated
}

// peakPerSecond returns the most arrivals in any one-second window, sliding.
func peakPerSecond(sorted []time.Duration) int {
	peak, lo := 0, 0
	for hi, t := range sorted {
		for t-sorted[lo] >= time.Second {
			lo++
		}
		peak = max(peak, hi-lo+1)
	}
	return peak
}

// peakPerClockSecond returns the most arrivals in one of the seconds
// counted from the provider's first request.
func peakPerClockSecond(sorted []time.Duration) int {
	peak, n, sec := 0, 0, time.Duration(-1)
	for _, t := range sorted {
		if s := t / time.Second; s != sec {
			sec, n = s, 0
		}
		n++
		peak = max(peak, n)
	}
	return peak
}

// window returns the arrivals in [from, to).
func window(sorted []time.Duration, from, to time.Duration) []time.Duration {
	lo, _ := slices.BinarySearch(sorted, from)
	hi, _ := slices.BinarySearch(sorted, to)
	return sorted[lo:max(lo, hi)]
}

// bySecond counts the arrivals in each whole second from from, up to to.
func bySecond(sorted []time.Duration, from, to time.Duration) []int {
	n := make([]int, max(0, int((to-from)/time.Second)))
	to = from + time.Duration(len(n))*time.Second
	for _, t := range window(sorted, from, to) {
		n[(t-from)/time.Second]++
	}
	return n
}
