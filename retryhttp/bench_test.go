package retryhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryhttp"
)

// BenchmarkGET sends one GET that succeeds at once to a loopback server,
// over a kept-alive connection, through plain http.Transport and through a
// retryhttp.Transport around it: the difference is the retry layer's cost on
// the success path.
func BenchmarkGET(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	benchmarks := []struct {
		name string
		wrap func(*http.Transport) http.RoundTripper
	}{
		{name: "http.Transport", wrap: func(t *http.Transport) http.RoundTripper { return t }},
		{name: "retryhttp.Transport", wrap: func(t *http.Transport) http.RoundTripper {
			return &retryhttp.Transport{Base: t}
		}},
		{name: "retryhttp.Transport/AttemptTimeout", wrap: func(t *http.Transport) http.RoundTripper {
			return &retryhttp.Transport{Base: t, Policy: retry.Policy{AttemptTimeout: time.Minute}}
		}},
		{name: "retryhttp.Transport/Timeout", wrap: func(t *http.Transport) http.RoundTripper {
			return &retryhttp.Transport{Base: t, Timeout: time.Minute}
		}},
		{name: "retryhttp.Transport/Hedge", wrap: func(t *http.Transport) http.RoundTripper {
			// The first attempt answers long before the hedge delay.
			return &retryhttp.Transport{Base: t, Policy: retry.Policy{HedgeDelay: retry.Constant(time.Hour)}}
		}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			rt := bm.wrap(base)
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Accept", "application/json")
			req.Header.Set("User-Agent", "retry-bench/1")
			req.Header.Set("Authorization", "Bearer 0123456789abcdef")
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
