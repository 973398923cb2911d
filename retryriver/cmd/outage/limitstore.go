package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// limitStore is the store of a shared limit as the drill's coordinator holds
// it: where the worker processes reach it, and, for -kill-store, how the
// drill takes it away and brings it back.
type limitStore struct {
	url   string
	kill  func() error // takes the store away from the limiters
	start func() error // brings it back, where it was
	close func()
}

// openLimitStore returns the store of a limiter of kind: for PostgreSQL the
// drill's own database (dbURL), through a cut of its own when the drill
// kills it; for Redis the server at redisURL, or, when that is empty or the
// drill kills it, a redis-server of the drill's own. A local limiter has
// none (nil).
func openLimitStore(ctx context.Context, kind, dbURL, redisURL string, kills bool) (*limitStore, error) {
	switch kind {
	case pgLimiter:
		if !kills {
			return &limitStore{url: dbURL, close: func() {}}, nil
		}
		c, err := newCut(dbURL)
		if err != nil {
			return nil, err
		}
		return &limitStore{url: c.url, kill: c.cut, start: c.restore, close: c.close}, nil
	case redisLimiter:
		if redisURL != "" && !kills {
			return &limitStore{url: redisURL, close: func() {}}, nil
		}
		s, err := startRedis(ctx)
		if err != nil {
			return nil, err
		}
		return &limitStore{url: s.url(), kill: s.kill, start: func() error { return s.start(ctx) }, close: s.close}, nil
	}
	return nil, nil
}

// cut is a loopback TCP proxy in front of PostgreSQL that the drill gives
// the limiters alone, so that it can take their store away without touching
// the jobs' database, which is the same PostgreSQL: River's own connections
// go direct. While cut, it has closed every connection through it and its
// listener, so that the limiters see what a stopped server does to its
// clients: connections broken mid-statement, and new ones refused.
type cut struct {
	target, addr, url string
	mu                sync.Mutex
	ln                net.Listener
	conns             map[net.Conn]struct{}
}

func newCut(dbURL string) (*cut, error) {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("outage: -kill-store with -limiter pg needs a PostgreSQL URL with a TCP host, not %q", dbURL)
	}
	c := &cut{target: u.Host, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.addr = ln.Addr().String()
	u.Host = c.addr
	c.url = u.String()
	c.serve(ln)
	return c, nil
}

func (c *cut) serve(ln net.Listener) {
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return // cut, or closed
			}
			go c.pipe(client)
		}
	}()
}

// pipe forwards one client's connection to PostgreSQL, both ways, until
// either side closes it or the cut does.
func (c *cut) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", c.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c.mu.Lock()
	if c.ln == nil { // cut meanwhile
		c.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	c.conns[client], c.conns[server] = struct{}{}, struct{}{}
	c.mu.Unlock()
	done := make(chan struct{}, 2)
	copyTo := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); dst.Close(); src.Close(); done <- struct{}{} }
	go copyTo(server, client)
	go copyTo(client, server)
	<-done
	<-done
	c.mu.Lock()
	delete(c.conns, client)
	delete(c.conns, server)
	c.mu.Unlock()
}

// cut closes every connection through it and stops listening.
func (c *cut) cut() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	for conn := range c.conns {
		conn.Close()
	}
	clear(c.conns)
	return nil
}

// restore listens again, on the same port.
func (c *cut) restore() error {
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("outage: the limiter's path to PostgreSQL could not be restored: %w", err)
	}
	c.serve(ln)
	return nil
}

func (c *cut) close() { _ = c.cut() }

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
