package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/adaptive"
	"github.com/seed93a044d1/retry/internal/sim/ingest"
	"github.com/seed93a044d1/retry/retryhttp"
)

// The live ingestion check is the ingestion study for real, scaled down
// to run in seconds: writers PUT through retryhttp to a loopback HTTP/2
// storage server that refuses connections for the outage (nothing listens
// on its port), then serves liveIngestSlots writes at once, queues the rest
// and does the work of writes whose client has gone. The study's times are
// a fifth (the outage, backoff, timeout, the breaker's), its work times a
// fifth of those again, so that the storage serves the study's 2,000
// writes a second with C = 20.
const (
	liveIngestSlots   = 20
	liveIngestWorkMin = 8 * time.Millisecond
	liveIngestWorkMax = 12 * time.Millisecond
	liveIngestTimeout = 100 * time.Millisecond
	liveIngestRate    = 2000 // writes a second: the storage's capacity at C
)

// liveIngestSize is the live check's size: the command's, or a test's
// smaller one.
type liveIngestSize struct {
	writes, writers int
	outage          time.Duration
	horizon         time.Duration // a run that has not drained this long after the return stops
}

// defaultLiveIngest is the command's live check: 5,000 writes over a 2 s
// outage for 400 writers, 20 times C as in the study.
var defaultLiveIngest = liveIngestSize{writes: 5000, writers: 400, outage: 2 * time.Second, horizon: 8 * time.Second}

// liveIngestPolicy is ingest.Policy at a fifth of its times.
func liveIngestPolicy() retry.Policy {
	return retry.Policy{
		MaxAttempts:    -1,
		Backoff:        retry.Exponential{Base: 20 * time.Millisecond, Cap: 400 * time.Millisecond},
		AttemptTimeout: liveIngestTimeout,
	}
}

// liveIngestVariant returns the policy of the named variant, with fresh
// bounds.
func liveIngestVariant(name string) retry.Policy {
	p := liveIngestPolicy()
	switch name {
	case ingest.Names.Rate:
		p.Limiter = retry.RateLimiter(rate.NewLimiter(liveIngestRate, liveIngestSlots))
	case ingest.Names.Fixed:
		p.Concurrency = &retry.ConcurrencyLimit{Slots: liveIngestSlots}
	case ingest.Names.Adaptive:
		p.Concurrency = &adaptive.Concurrency{}
	case ingest.Names.AdaptiveBreaker:
		p.Concurrency = &adaptive.Concurrency{}
		p.Breaker = &retry.CircuitBreaker{OpenFor: time.Second, Window: 2 * time.Second}
	}
	return p
}

// liveIngest runs the five variants for real and prints the study's
// backlog table for them, and writes one chart.
func liveIngest(c config, stdout, stderr io.Writer) ([]string, error) {
	z := c.liveIngest
	fmt.Fprintf(stdout, "\nLIVE INGESTION: %s writes left by a %s outage, %s writers PUT through retryhttp to a loopback HTTP/2 storage server (real time)\n",
		count(z.writes), dur(z.outage), count(z.writers))
	writeWrapped(stdout, "Storage: ", fmt.Sprintf("nothing listens on its port for the outage (connection refused); then it serves C = %d "+
		"writes at once, each sleeping %s to %s (%s writes a second), queues the rest first come first served, unbounded, and "+
		"does the work of a write whose client has gone.", liveIngestSlots, dur(liveIngestWorkMin), dur(liveIngestWorkMax), count(liveIngestRate)), 114)
	writeWrapped(stdout, "Policy: ", fmt.Sprintf("the study's at a fifth of its times: MaxAttempts -1, Exponential{Base: 20ms, Cap: 400ms}, "+
		"AttemptTimeout %s; the rate limit rate.NewLimiter(%d, %d) through retry.RateLimiter; the fixed limit %d slots (C); "+
		"the breaker CircuitBreaker{OpenFor: 1s, Window: 2s}. A run that has not drained %s after the return stops.",
		dur(liveIngestTimeout), liveIngestRate, liveIngestSlots, liveIngestSlots, dur(z.horizon)), 114)
	var results []ingest.Result
	for i, name := range ingestNames() {
		fmt.Fprintf(stderr, "live: ingest, %s (a few seconds)\n", name)
		r, err := runLiveIngest(name, liveIngestVariant(name), z, c.seed+uint64(i))
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	fixed := *byName(results, ingest.Names.Fixed)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nvariant\tdrain\tvs fixed\tpeak in flight\tp99 latency\ttimed out\tattempts\tin the outage\tstopped by the breaker\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%.2fx\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rowName(r, liveIngestSlots), drainOf(r), r.Drain().Seconds()/fixed.Drain().Seconds(),
			count(r.Peak), ms(r.Quantile(0.99)), count(r.TimedOut), count(r.Attempts), count(r.InOutage), count(r.Stopped))
	}
	tw.Flush()
	fmt.Fprintln(stdout, "(as in the study's table; in the outage: attempts refused, the port not yet listening; stopped: calls the")
	fmt.Fprintln(stdout, " breaker stopped, put back for the time it named; real time moves every figure from run to run)")
	lesson := liveIngestLesson(results, z)
	writeWrapped(stdout, "What it shows: ", lesson, 114)

	st := ingest.Storage{Slots: liveIngestSlots, Outage: z.outage}
	ch := heldChart(results, nil, st, "Live ingestion: writes the loopback storage holds", lesson)
	ch.Note = fmt.Sprintf("One run for real: %s writes over a %s outage, %s writers through retryhttp, C = %d at %s to %s a write; "+
		"real time moves every figure from run to run.", count(z.writes), dur(z.outage), count(z.writers), liveIngestSlots, dur(liveIngestWorkMin), dur(liveIngestWorkMax))
	name := filepath.Join(c.out, "ingest-live.svg")
	if err := ch.WriteFile(name); err != nil {
		return nil, err
	}
	return []string{name}, nil
}

// liveIngestLesson says what the live runs show, from their numbers; a
// claim is made only when the numbers went its way.
func liveIngestLesson(results []ingest.Result, z liveIngestSize) string {
	none, rl, fixed := byName(results, ingest.Names.None), byName(results, ingest.Names.Rate), byName(results, ingest.Names.Fixed)
	a, ab := byName(results, ingest.Names.Adaptive), byName(results, ingest.Names.AdaptiveBreaker)
	if none == nil || rl == nil || fixed == nil || a == nil || ab == nil {
		return ""
	}
	out := fmt.Sprintf("With no bound the %s writers hold up to %s writes at the storage, %.0f times C, %s time out, and it %s; "+
		"the fixed limit of C %s with %s.", count(z.writers), count(none.Peak), float64(none.Peak)/liveIngestSlots,
		plural(none.TimedOut, "attempt"), drains(*none), drains(*fixed), plural(fixed.TimedOut, "timeout"))
	if none.Drained && fixed.Drained && none.Drain() > fixed.Drain() {
		out += fmt.Sprintf(" No bound takes %s as long.", times(none.Drain(), fixed.Drain()))
	}
	out += fmt.Sprintf(" The rate limit, told the capacity, %s holding at most %s, with %s.", drains(*rl), count(rl.Peak), plural(rl.TimedOut, "timeout"))
	if served := storedRate(*fixed, z.outage); fixed.Drained && served < liveIngestRate && rl.Peak > 2*liveIngestSlots {
		out += fmt.Sprintf(" Real sleeps run long, so the storage serves %s writes a second, not %s: the rate told in advance is above "+
			"what it serves, and the queue grows, where a bound on what is in flight does not care.", count(int(served)), count(liveIngestRate))
	}
	out += fmt.Sprintf(" The adaptive limit, told nothing, %s (%.2f times the fixed limit's) holding at most %s.",
		drains(*a), a.Drain().Seconds()/fixed.Drain().Seconds(), count(a.Peak))
	if a.InOutage > 0 {
		out += fmt.Sprintf(" The breaker takes the attempts in the outage from %s to %s, and %s.", count(a.InOutage), count(ab.InOutage), drains(*ab))
	}
	return out
}

// liveStorage is the loopback storage: slots writes in service at once,
// the rest queued in arrival order, each write's work done whether or not
// its client is still there. It records the writes it holds, the most in
// each ingest.TraceBin. Safe for concurrent use.
type liveStorage struct {
	slots            int
	workMin, workMax time.Duration
	start            time.Time
	closed           chan struct{} // closed to free every handler at the end of a run

	mu       sync.Mutex
	rng      *rand.Rand
	busy     int
	queue    []chan struct{} // a write waiting for a slot, given it when closed
	held     int
	peak     int
	heldPeak []int
}

func (s *liveStorage) mark() {
	k := int(time.Since(s.start) / ingest.TraceBin)
	for len(s.heldPeak) <= k {
		s.heldPeak = append(s.heldPeak, 0)
	}
	s.heldPeak[k] = max(s.heldPeak[k], s.held)
	s.peak = max(s.peak, s.held)
}

func (s *liveStorage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.held++
	s.mark()
	work := s.workMin + time.Duration(s.rng.Float64()*float64(s.workMax-s.workMin))
	var turn chan struct{}
	if s.busy < s.slots {
		s.busy++
	} else {
		turn = make(chan struct{})
		s.queue = append(s.queue, turn)
	}
	s.mu.Unlock()
	if turn != nil {
		select {
		case <-turn:
		case <-s.closed:
			return
		}
	}
	// The work is done even when the client has gone: nothing tells the
	// storage, whose slot it holds all the same.
	t := time.NewTimer(work)
	select {
	case <-t.C:
	case <-s.closed:
	}
	t.Stop()
	s.mu.Lock()
	s.held--
	s.mark()
	if len(s.queue) > 0 {
		close(s.queue[0]) // the slot goes to the longest waiter
		s.queue = s.queue[1:]
	} else {
		s.busy--
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// reservePort returns a loopback address whose port nothing listens on,
// from below the usual ephemeral ranges (from 32768 on Linux, 49152
// elsewhere), so that no dial of the clients' can be given it as its own
// port while the storage is down and take it.
func reservePort(seed uint64) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9047))
	for range 50 {
		addr := "127.0.0.1:" + strconv.Itoa(20000+rng.IntN(12000))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			return addr, nil
		}
	}
	return "", errors.New("live ingest: no free loopback port between 20000 and 32000")
}

// attemptLog is what the clients' transport saw of every attempt. Safe
// for concurrent use.
type attemptLog struct {
	next http.RoundTripper
	run  context.Context // the run's: an attempt cut as it ends is neither a timeout nor a latency

	mu        sync.Mutex
	attempts  int
	refused   int
	timedOut  int
	latencies []time.Duration
}

func (l *attemptLog) RoundTrip(req *http.Request) (*http.Response, error) {
	began := time.Now()
	resp, err := l.next.RoundTrip(req)
	d := time.Since(began)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts++
	switch {
	case err != nil && errors.Is(err, syscall.ECONNREFUSED):
		l.refused++
	case l.run.Err() != nil:
	default:
		l.latencies = append(l.latencies, d)
		// The attempt's context ended: its timeout, the only end the
		// loop gives it here (retryhttp's request context then says
		// canceled, not deadline exceeded).
		if err != nil && req.Context().Err() != nil {
			l.timedOut++
		}
	}
	return resp, err
}

// runLiveIngest runs one variant: the storage down for z.outage, then up;
// z.writes writes arriving evenly over the outage, taken in order by
// z.writers goroutines, each storing one at a time by a PUT through a
// retryhttp client under p. A call the breaker stops is made again at the
// time it names.
func runLiveIngest(name string, p retry.Policy, z liveIngestSize, seed uint64) (ingest.Result, error) {
	addr, err := reservePort(seed)
	if err != nil {
		return ingest.Result{}, err
	}
	start := time.Now()
	s := &liveStorage{slots: liveIngestSlots, workMin: liveIngestWorkMin, workMax: liveIngestWorkMax, start: start,
		closed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0x1e57))}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true) // a timed-out write's stream is reset, its connection kept
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, Protocols: &protocols,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1 << 20}} // the queue is the storage's, unbounded
	served := make(chan error, 1)
	up := time.AfterFunc(z.outage, func() {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			served <- fmt.Errorf("live ingest: the storage cannot listen again on %s: %w", addr, err)
			return
		}
		served <- nil
		_ = hs.Serve(ln) // ErrServerClosed after Close
	})
	defer func() {
		up.Stop()
		close(s.closed)
		_ = hs.Close()
	}()

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only
	tr.Protocols = &protocols
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(z.outage+z.horizon))
	defer cancel()
	log := &attemptLog{next: tr, run: ctx}
	client := retryhttp.NewClient(&http.Client{Transport: log}, p)
	url := "http://" + addr + "/write/"

	res := ingest.Result{Name: name, Writes: z.writes, Outage: z.outage}
	var mu sync.Mutex // guards res
	writes := make(chan int, z.writes)
	var wg sync.WaitGroup
	for range z.writers {
		wg.Go(func() {
			for i := range writes {
				for ctx.Err() == nil {
					err := put(ctx, client, url+strconv.Itoa(i))
					if err == nil {
						at := time.Since(start)
						mu.Lock()
						res.Stored++
						res.Done = max(res.Done, at)
						k := int(at / ingest.TraceBin)
						for len(res.StoredIn) <= k {
							res.StoredIn = append(res.StoredIn, 0)
						}
						res.StoredIn[k]++
						mu.Unlock()
						break
					}
					var open interface{ Until() time.Time }
					if !errors.Is(err, retry.ErrBreakerOpen) || !errors.As(err, &open) {
						break // the run's end: MaxAttempts -1 stops only there or at the breaker
					}
					mu.Lock()
					res.Stopped++
					mu.Unlock()
					t := time.NewTimer(time.Until(open.Until()))
					select {
					case <-t.C:
					case <-ctx.Done():
					}
					t.Stop()
				}
			}
		})
	}
	for i := range z.writes {
		time.Sleep(time.Until(start.Add(time.Duration(int64(i) * int64(z.outage) / int64(z.writes)))))
		writes <- i
	}
	close(writes)
	wg.Wait()
	select {
	case err := <-served:
		if err != nil {
			return ingest.Result{}, err
		}
	default:
	}

	res.Drained = res.Stored == z.writes
	if !res.Drained {
		res.Done = z.outage + z.horizon
	}
	log.mu.Lock()
	res.Attempts, res.InOutage, res.TimedOut = log.attempts, log.refused, log.timedOut
	res.Latencies = slices.Clone(log.latencies)
	log.mu.Unlock()
	slices.Sort(res.Latencies)
	s.mu.Lock()
	res.Peak, res.HeldPeak = s.peak, slices.Clone(s.heldPeak)
	s.mu.Unlock()
	return res, nil
}

// put stores one write: a PUT, which retryhttp retries as idempotent.
func put(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return retry.CheckResponse(resp)
}
