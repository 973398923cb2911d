// Package slowlink is a loopback TCP proxy for the drill's tests: it sits
// between the processes of a fleet and their store (PostgreSQL, Redis) and
// gives the link what a real network gives it, delays drawn from a range on
// the requests going to the store and, if asked, on the replies coming back,
// and outages: every connection closed and new ones refused, for a while or
// until told.
package slowlink

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Options configure a [Proxy]. The zero value forwards without delay.
type Options struct {
	// MinDelay and MaxDelay bound the delay of each request: every chunk
	// of bytes read from a client waits a time drawn uniformly from
	// [MinDelay, MaxDelay] before it is written to the target. Without
	// reply delays each request/response exchange is delayed once, by its
	// own draw. A MaxDelay below MinDelay counts as MinDelay.
	MinDelay, MaxDelay time.Duration

	// MinReplyDelay and MaxReplyDelay bound the delay of each reply: every
	// chunk of bytes read from the target waits a time drawn uniformly from
	// [MinReplyDelay, MaxReplyDelay] before it is written back to the
	// client. Both zero, the default, sends replies back at once. A
	// MaxReplyDelay below MinReplyDelay counts as MinReplyDelay.
	MinReplyDelay, MaxReplyDelay time.Duration

	// Seed seeds the draws, so that two runs with the same seed and the
	// same traffic draw the same delays, in the order chunks arrive. The
	// replies' draws come from a stream of their own, so that the requests
	// draw the same delays for a seed with reply delays or without.
	Seed uint64

	// OnDelay, when set, is called with each request delay drawn, before
	// the chunk waits it (on the connection's goroutine: it must not
	// block). Reply delays are not reported.
	OnDelay func(time.Duration)
}

// Proxy forwards the TCP connections made to its loopback address to a
// target. Chunks keep their order on each connection, in each direction: a
// chunk whose draw is shorter than the one before it waits for that one to
// be written first, as on a real link.
//
// Proxy is safe for simultaneous use by multiple goroutines.
type Proxy struct {
	target string
	opts   Options
	addr   string

	mu     sync.Mutex
	rng    *rand.Rand   // the requests' draws
	back   *rand.Rand   // the replies' draws
	ln     net.Listener // nil while cut
	conns  map[net.Conn]struct{}
	closed bool
	timer  *time.Timer // brings the link back after Drop
}

// New starts a proxy to target ("host:port") on a free loopback port.
func New(target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slowlink: %w", err)
	}
	p := &Proxy{target: target, opts: opts, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{},
		rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		// Constants whose xor is not the requests' 0x9e3779b97f4a7c15, so
		// that no seed's reply stream is any seed's request stream.
		back: rand.New(rand.NewPCG(opts.Seed^0xbf58476d1ce4e5b9, opts.Seed^0x94d049bb133111eb))}
	p.serve(ln)
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:port": the same for its
// whole life, across cuts.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // cut, or closed
			}
			go p.pipe(c)
		}
	}()
}

// requestDelay returns the next request's delay.
func (p *Proxy) requestDelay() time.Duration {
	d := p.draw(p.rng, p.opts.MinDelay, p.opts.MaxDelay)
	if p.opts.OnDelay != nil {
		p.opts.OnDelay(d)
	}
	return d
}

// replyDelay returns the next reply's delay.
func (p *Proxy) replyDelay() time.Duration {
	return p.draw(p.back, p.opts.MinReplyDelay, p.opts.MaxReplyDelay)
}

// draw returns a delay drawn from rng in [lo, max(hi, lo)].
func (p *Proxy) draw(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	hi = max(hi, lo)
	if hi == lo {
		return lo
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// track adds c to the connections a cut closes, unless the link is cut.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// pipe forwards one client's connection until either side closes it or
// the link is cut.
func (p *Proxy) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		if max(p.opts.MinReplyDelay, p.opts.MaxReplyDelay) > 0 {
			p.forward(client, server, p.replyDelay)
		} else {
			_, _ = io.Copy(client, server) // no queue to hold replies that never wait
		}
		client.Close()
		server.Close()
		done <- struct{}{}
	}()
	go func() {
		p.forward(server, client, p.requestDelay)
		client.Close()
		server.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
	p.untrack(client, server)
}

// chunk is bytes read from one side, and when they may go on.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies src to dst, each chunk read from src written once its
// delay (drawn by delay as it arrives) has passed, in order. The reading
// goes on while a chunk waits, so a chunk's delay counts from when it
// arrived, not from when the one before it was written.
func (p *Proxy) forward(dst, src net.Conn, delay func() time.Duration) {
	queue := make(chan chunk, 256)
	stop := make(chan struct{})
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{b: buf[:n], due: time.Now().Add(delay())}:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer close(stop)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// Cut takes the link away: it closes every connection through the proxy
// and stops listening, so that new connections are refused, as a stopped
// server's clients see. It stays cut until [Proxy.Restore].
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *Proxy) cutLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore brings the link back after a cut, on the same port. It does
// nothing if the link is up.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("slowlink: proxy closed")
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("slowlink: listening again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Drop cuts the link now and brings it back after d, on a timer of its
// own; back, when its value arrives, says when it came back or why it
// could not.
func (p *Proxy) Drop(d time.Duration) (back <-chan error) {
	ch := make(chan error, 1)
	p.mu.Lock()
	p.cutLocked()
	p.timer = time.AfterFunc(d, func() { ch <- p.Restore() })
	p.mu.Unlock()
	return ch
}

// Close cuts the link for good.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.cutLocked()
}
