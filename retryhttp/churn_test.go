package retryhttp_test

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// BenchmarkConnectionChurn measures how many connections a loopback server
// accepts per 1,000 calls when 50 goroutines share one client, with
// http.DefaultTransport's pool settings (MaxIdleConnsPerHost 2) or a pool
// as large as the concurrency, with and without retryhttp, and with and
// without a server that answers 20% of requests with 503. An op is one call.
func BenchmarkConnectionChurn(b *testing.B) {
	const clients = 50
	benchmarks := []struct {
		name        string
		idlePerHost int // 0: http.DefaultTransport's
		unavailable float64
		retry       *retry.Policy
	}{
		{name: "plain/ok", unavailable: 0},
		{name: "plain/503x20%", unavailable: 0.2},
		{name: "retryhttp/ok", unavailable: 0, retry: &retry.Policy{}},
		{name: "retryhttp/503x20%", unavailable: 0.2, retry: &retry.Policy{}},
		{name: "retryhttp/503x20%/no-wait", unavailable: 0.2, retry: &retry.Policy{Backoff: retry.Constant(0)}},
		{name: "plain/ok/idle50", idlePerHost: clients, unavailable: 0},
		{name: "retryhttp/503x20%/idle50", idlePerHost: clients, unavailable: 0.2, retry: &retry.Policy{}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			var conns, requests atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				time.Sleep(time.Millisecond) // some work, so that calls overlap
				if rand.Float64() < bm.unavailable {
					w.Header().Set("Content-Length", "4")
					w.WriteHeader(http.StatusServiceUnavailable)
					io.WriteString(w, "busy")
					return
				}
				w.Header().Set("Content-Length", "2")
				io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()

			base := http.DefaultTransport.(*http.Transport).Clone()
			if bm.idlePerHost > 0 {
				base.MaxIdleConnsPerHost = bm.idlePerHost
			}
			defer base.CloseIdleConnections()
			var rt http.RoundTripper = base
			if bm.retry != nil {
				rt = &retryhttp.Transport{Base: base, Policy: *bm.retry}
			}
			client := &http.Client{Transport: rt}

			var next atomic.Int64
			var failed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range clients {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						resp, err := client.Get(srv.URL)
						if err != nil {
							failed.Add(1)
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if failed.Load() > 0 {
				b.Fatalf("%d calls failed", failed.Load())
			}
			b.ReportMetric(float64(conns.Load())*1000/float64(b.N), "conns/1k-calls")
			b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/call")
		})
	}
}
