package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/internal/sim"
	"github.com/seed93a044d1/retry/internal/sim/hedging"
	"github.com/seed93a044d1/retry/retryhttp"
)

// The live hedging check: the hedging study's server for real, on
// loopback, with the study's heavy tail (attempts of 4-6 ms, 2% of them
// after a stall of about 1 s), called through retryhttp with and without
// Policy.HedgeDelay.
const (
	defaultLiveCalls = 1000
	liveConcurrency  = 50                    // calls in flight at once
	liveHedgeDelay   = 10 * time.Millisecond // above the fast attempts with a loaded machine's scheduling delays on top
)

// liveHedgeResult is what one live run measured.
type liveHedgeResult struct {
	name      string
	latencies []time.Duration // of the calls that succeeded, sorted
	failed    int
	firstErr  error // the first failed call's error
	arrived   int64 // requests the server received
	cut       int64 // requests whose client went away before the answer
	conns     int64 // connections the server accepted
	calls     int
}

// liveHedging runs the check without and with hedging and prints the
// comparison.
func liveHedging(c config, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "\nLIVE HEDGING: %d GET calls, %d at a time, through retryhttp to a loopback HTTP server (real time)\n", c.liveCalls, liveConcurrency)
	fmt.Fprintf(stdout, "Server: the hedging study's heavy tail for real: each request sleeps 4 to 6 ms, 2%% of them 0.9 to 1.1 s more,\n")
	fmt.Fprintf(stdout, "  drawn per call and attempt; a request whose client goes away stops at once.\n")
	fmt.Fprintf(stdout, "Policies: the zero Policy, and the same with HedgeDelay: retry.Constant(%v) (the study's p95 plus room for this\n", liveHedgeDelay)
	fmt.Fprintf(stdout, "  machine's scheduling delays, which real time adds to every attempt).\n")
	fmt.Fprintf(stdout, "Protocols: HTTP/2 without TLS (h2c), where a cancelled loser's stream is reset and its connection kept; and\n")
	fmt.Fprintf(stdout, "  HTTP/1.1, where a request cancelled in flight costs its connection.\n")
	hedge := retry.Policy{HedgeDelay: retry.Constant(liveHedgeDelay)}
	runs := []struct {
		name   string
		policy retry.Policy
		h2     bool
	}{
		{"HTTP/2, no hedging", retry.Policy{}, true},
		{fmt.Sprintf("HTTP/2, hedge at %v", liveHedgeDelay), hedge, true},
		{"HTTP/1.1, no hedging", retry.Policy{}, false},
		{fmt.Sprintf("HTTP/1.1, hedge at %v", liveHedgeDelay), hedge, false},
	}
	var results []liveHedgeResult
	for _, r := range runs {
		fmt.Fprintf(stderr, "live: %s (a second or two)\n", r.name)
		res, err := runLiveHedge(r.name, r.policy, r.h2, c.liveCalls, c.seed)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nrun\tsucceeded\tp50\tp99\tp99.9\textra load\tcut by the client\tconnections\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, count(len(r.latencies)),
			ms(sim.Percentile(r.latencies, 0.5)), ms(sim.Percentile(r.latencies, 0.99)), ms(sim.Percentile(r.latencies, 0.999)),
			pct(float64(r.arrived)/float64(r.calls)-1), count(int(r.cut)), count(int(r.conns)))
	}
	tw.Flush()
	fmt.Fprintln(stdout, "(extra load: requests the server received per call - 1; cut: requests the server saw cancelled, the losers;")
	fmt.Fprintln(stdout, " connections: those the server accepted; each run has a fresh client and server, and the same draws)")
	writeWrapped(stdout, "What it shows: ", liveHedgeLesson(results), 114)
	return nil
}

// liveHedgeLesson says what the live runs show, from their numbers.
func liveHedgeLesson(results []liveHedgeResult) string {
	if len(results) != 4 {
		return ""
	}
	p999 := func(r liveHedgeResult) string { return ms(sim.Percentile(r.latencies, 0.999)) }
	extra := func(r liveHedgeResult) string { return pct(float64(r.arrived)/float64(max(r.calls, 1)) - 1) }
	h2, h2Hedged, h1, h1Hedged := results[0], results[1], results[2], results[3]
	out := fmt.Sprintf("For real over HTTP/2, hedging at %v takes the p99.9 from %s to %s for %s more requests, its %s losers "+
		"reset on %s (%s without hedging). Over HTTP/1.1 it gives %s (%s without) for %s more requests, on %s (%s without)",
		liveHedgeDelay, p999(h2), p999(h2Hedged), extra(h2Hedged), count(int(h2Hedged.cut)), plural(int(h2Hedged.conns), "connection"),
		count(int(h2.conns)), p999(h1Hedged), p999(h1), extra(h1Hedged), plural(int(h1Hedged.conns), "connection"), count(int(h1.conns)))
	if h1Hedged.conns > 2*(h1Hedged.cut+h1.conns) {
		out += fmt.Sprintf(", far more than its %s losers, each of which costs its connection: every hedged call costs one, "+
			"even one that never hedged, because the winning attempt's context ends as it returns, before its body is read, "+
			"and net/http then closes the connection.", count(int(h1Hedged.cut)))
	} else {
		out += ": there each loser cancelled in flight costs its connection."
	}
	for _, r := range results {
		if r.failed > 0 {
			out += fmt.Sprintf(" %s: %s failed, the first with %q.", r.name, plural(r.failed, "call"), r.firstErr.Error())
		}
	}
	if h2Hedged.failed > 0 && h2.failed == 0 {
		out += " Over HTTP/2 the same early end of the winner's context cuts bodies still on the way."
	}
	return out
}

// tailServer answers each request after the study's heavy-tailed time for
// its call and attempt, and counts what it saw. Safe for concurrent use.
type tailServer struct {
	seed                  uint64
	mu                    sync.Mutex
	tries                 map[string]int
	arrived, cut, answers atomic.Int64
}

func (s *tailServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.arrived.Add(1)
	key := r.Header.Get("X-Call")
	i, err := strconv.Atoi(key)
	if err != nil {
		http.Error(w, "missing X-Call", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.tries[key]++
	n := s.tries[key]
	s.mu.Unlock()
	timer := time.NewTimer(hedging.StudyTail.At(s.seed, i, n))
	defer timer.Stop()
	select {
	case <-timer.C:
		s.answers.Add(1)
		io.WriteString(w, "ok")
	case <-r.Context().Done():
		s.cut.Add(1)
	}
}

// runLiveHedge serves the tail on 127.0.0.1, over HTTP/2 without TLS if h2
// and HTTP/1.1 if not, and sends calls GETs through a retryhttp client
// under p, liveConcurrency at a time.
func runLiveHedge(name string, p retry.Policy, h2 bool, calls int, seed uint64) (liveHedgeResult, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return liveHedgeResult{}, err
	}
	srv := &tailServer{seed: seed, tries: map[string]int{}}
	var conns atomic.Int64
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	var protocols http.Protocols
	if h2 {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	hs.Protocols = &protocols
	go func() { _ = hs.Serve(ln) }() // ErrServerClosed after Shutdown
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only
	tr.MaxIdleConnsPerHost = 2 * liveConcurrency
	tr.Protocols = &protocols
	defer tr.CloseIdleConnections()
	client := retryhttp.NewClient(&http.Client{Transport: tr}, p)
	url := "http://" + ln.Addr().String() + "/read"

	ctx, cancel := context.WithTimeout(context.Background(), liveBound)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		firstErr  error
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	for range liveConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= calls {
					return
				}
				start := time.Now()
				err := read(ctx, client, url, i)
				d := time.Since(start)
				mu.Lock()
				if err == nil {
					latencies = append(latencies, d)
				} else {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(latencies)
	return liveHedgeResult{
		name: name, latencies: latencies, failed: failed, firstErr: firstErr, calls: calls,
		arrived: srv.arrived.Load(), cut: srv.cut.Load(), conns: conns.Load(),
	}, nil
}

// read makes call i: a GET, which retryhttp may hedge, read to its end.
func read(ctx context.Context, client *http.Client, url string, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Call", strconv.Itoa(i))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	return retry.CheckResponse(resp)
}
