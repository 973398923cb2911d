package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed93a044d1/retry/retryriver/cmd/outage/internal/slowlink"
)

// limitStore is the store of a shared limit as the drill's coordinator holds
// it: where the worker processes reach it, and, for -kill-store and -drop,
// how the drill takes it away and brings it back.
type limitStore struct {
	url   string
	kill  func() error // takes the store away from the limiters
	start func() error // brings it back, where it was
	close func()
	// link is the loopback proxy the limiters reach the store through,
	// nil when they go direct: with -delay it delays each request, with
	// -back-delay each reply, and -drop cuts it.
	link *slowlink.Proxy
}

// linkConfig is the network between the limiters and their store: each
// request's delay is drawn from [minDelay, maxDelay] (-delay), each reply's
// from [minReplyDelay, maxReplyDelay] (-back-delay), seeded.
type linkConfig struct {
	minDelay, maxDelay           time.Duration
	minReplyDelay, maxReplyDelay time.Duration
	seed                         uint64
	proxied                      bool // through a proxy even without a delay (-drop)
}

// delayed reports whether the link delays requests, replies or both.
func (l linkConfig) delayed() bool { return l.maxDelay > 0 || l.maxReplyDelay > 0 }

// openLimitStore returns the store of a limiter of kind: for PostgreSQL the
// drill's own database (dbURL), through a proxy of its own when the drill
// kills it or the link is delayed or dropped; for Redis the server at
// redisURL, or, when that is empty or the drill kills it, a redis-server of
// the drill's own, through a proxy when the link is delayed or dropped. A
// local limiter has none (nil).
func openLimitStore(ctx context.Context, kind, dbURL, redisURL string, kills bool, link linkConfig) (*limitStore, error) {
	proxied := link.proxied || link.delayed()
	switch kind {
	case pgLimiter:
		if !kills && !proxied {
			return &limitStore{url: dbURL, close: func() {}}, nil
		}
		ls := &limitStore{}
		if err := ls.through(dbURL, link); err != nil {
			return nil, err
		}
		ls.kill = func() error { ls.link.Cut(); return nil }
		ls.start = ls.link.Restore
		return ls, nil
	case redisLimiter:
		ls := &limitStore{url: redisURL, close: func() {}}
		if redisURL == "" || kills {
			s, err := startRedis(ctx)
			if err != nil {
				return nil, err
			}
			ls.url, ls.kill, ls.start, ls.close = s.url(), s.kill, func() error { return s.start(ctx) }, s.close
		}
		if proxied {
			closeServer := ls.close
			if err := ls.through(ls.url, link); err != nil {
				closeServer()
				return nil, err
			}
			closeLink := ls.close
			ls.close = func() { closeLink(); closeServer() }
		}
		return ls, nil
	}
	return nil, nil
}

// through puts a proxy of link's between the limiters and the store at
// rawURL, and points ls's URL at it.
func (ls *limitStore) through(rawURL string, link linkConfig) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("outage: the limiter's store needs a URL with a TCP host to be reached through a proxy, not %q", rawURL)
	}
	p, err := slowlink.New(u.Host, slowlink.Options{MinDelay: link.minDelay, MaxDelay: link.maxDelay,
		MinReplyDelay: link.minReplyDelay, MaxReplyDelay: link.maxReplyDelay, Seed: link.seed})
	if err != nil {
		return err
	}
	u.Host = p.Addr()
	ls.url, ls.link, ls.close = u.String(), p, p.Close
	return nil
}

// redisServer is a redis-server of the drill's own, on a loopback port,
// with no persistence (as .ci/redis starts one), that the drill can kill
// with SIGKILL and start again on the same port: a crash, which loses every
// schedule it held.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func startRedis(ctx context.Context) (*redisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("outage: -limiter redis needs -redis URL (or RETRY_REDIS_URL), or, to start one of its own and for -kill-store, the redis-server binary (apt-get install -y redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "retryriver-outage-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{port: port, dir: dir}
	if err := s.start(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *redisServer) url() string { return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0" }

// start starts the server and waits until it answers.
func (s *redisServer) start(ctx context.Context) error {
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("outage: starting redis-server: %w", err)
	}
	s.cmd = cmd
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.port), MaxRetries: -1})
	defer client.Close()
	for giveUp := time.Now().Add(10 * time.Second); ; {
		if client.Ping(ctx).Err() == nil {
			return nil
		}
		if time.Now().After(giveUp) || ctx.Err() != nil {
			return fmt.Errorf("outage: redis-server on port %d did not answer within 10s", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the server at once, as a crash would.
func (s *redisServer) kill() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
	return nil
}

func (s *redisServer) close() {
	_ = s.kill()
	os.RemoveAll(s.dir)
}
