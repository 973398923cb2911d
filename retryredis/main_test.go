package retryredis

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/fleet/fleettest"
)

// TestMain lets the test binary be a worker of a fleettest.Drill or
// SlotDrill: a process of the fleet, with its own Limiter or Concurrency on
// the Redis that RETRY_REDIS_URL names.
func TestMain(m *testing.M) {
	if d, ok := fleettest.Worker(); ok {
		opt, err := redis.ParseURL(os.Getenv("RETRY_REDIS_URL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		lim, err := NewLimiter(redis.NewClient(opt), d.Name, rate.Limit(d.Rate), d.Burst, &fleet.Options{Fallback: d.Fallback, Timeout: d.Timeout})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		d.Work(lim)
	}
	if d, ok := fleettest.SlotWorker(); ok {
		opt, err := redis.ParseURL(os.Getenv("RETRY_REDIS_URL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c, err := NewConcurrency(redis.NewClient(opt), d.Name, d.Limit, d.Lease, &fleet.Options{Timeout: time.Second})
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

// redisURL returns the URL of the Redis the tests use, or skips.
func redisURL(t testing.TB) string {
	url := os.Getenv("RETRY_REDIS_URL")
	if url == "" {
		t.Skip("needs Redis: set RETRY_REDIS_URL, or run from the repository's root: " +
			"bash -c 'source .ci/redis; start_redis; trap stop_redis EXIT; cd retryredis && go test ./...'")
	}
	return url
}

func newClient(t testing.TB, url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// uniqueName returns a limit's name that no other run uses.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("test-%s-%s", t.Name(), rand.Text()[:8])
}

// server is a redis-server of the test's own, which it can kill and start
// again on the same port.
type server struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
}

// startServer starts a redis-server of the test's own, or skips when there
// is no redis-server binary.
func startServer(t testing.TB) *server {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs the redis-server binary (apt-get install -y redis-server) to stop a server of its own")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{t: t, port: port}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) url() string { return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0" }

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir())
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.port), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server at once, as a crash would.
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
