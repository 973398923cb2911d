package retrypg

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// TestMain lets the test binary be a worker of a fleettest.Drill or
// SlotDrill: a process of the fleet, with its own Limiter or Concurrency on
// the database RETRY_POSTGRES_URL names.
func TestMain(m *testing.M) {
	if d, ok := fleettest.Worker(); ok {
		pool, err := pgxpool.New(context.Background(), os.Getenv("RETRY_POSTGRES_URL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		lim, err := NewLimiter(pool, d.Name, rate.Limit(d.Rate), d.Burst, &fleet.Options{Fallback: d.Fallback, Timeout: d.Timeout})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		d.Work(lim)
	}
	if d, ok := fleettest.SlotWorker(); ok {
		pool, err := pgxpool.New(context.Background(), os.Getenv("RETRY_POSTGRES_URL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c, err := NewConcurrency(pool, d.Name, d.Limit, d.Lease, &fleet.Options{Timeout: time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		d.Work(c)
	}
	os.Exit(m.Run())
}

// must returns a function that returns a constructor's value, or ends the
// test on its error: must(t)(NewLimiter(...)).
func must(t testing.TB) func(*fleet.Limiter, error) *fleet.Limiter {
	return func(l *fleet.Limiter, err error) *fleet.Limiter {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// limiterDB returns the URL of the database the limiter's tests use, or
// skips.
func limiterDB(t testing.TB) string {
	dsn := os.Getenv("RETRY_POSTGRES_URL")
	if dsn == "" {
		t.Skip("needs PostgreSQL: set RETRY_POSTGRES_URL, or run from the repository's root: " +
			"bash -c 'source .ci/postgres; start_postgres; trap stop_postgres EXIT; cd retrypg && go test ./...'")
	}
	return dsn
}

func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// limitName returns a limit's name that no other run uses.
func limitName(t testing.TB) string {
	return fmt.Sprintf("test-%s-%s", t.Name(), rand.Text()[:8])
}

// proxy stands between the tests' clients and PostgreSQL on a loopback
// port of its own, so that a test can take the server away (stop: every
// connection cut, new ones refused, as a stopped cluster does) and bring it
// back, without touching the cluster the other tests share.
type proxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newProxy(t testing.TB, dsn string) (*proxy, string) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the proxy needs a URL with a TCP host: %q", dsn)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: u.Host, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(p.stop)
	u.Host = p.addr
	return p, u.String()
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[s] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

// stop cuts every connection and refuses new ones.
func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// start listens again on the same port.
func (p *proxy) start() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil && strings.Contains(err.Error(), "in use") {
		p.t.Errorf("the proxy's port was taken meanwhile: %v", err)
		return
	}
	if err != nil {
		p.t.Error(err)
		return
	}
	p.serve(ln)
}
