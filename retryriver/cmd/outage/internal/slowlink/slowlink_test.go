package slowlink_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry/retryriver/cmd/outage/internal/slowlink"
)

// echo starts a loopback server that writes back every byte it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// delays records the proxy's draws, in order.
type delays struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *delays) add(d time.Duration) { r.mu.Lock(); r.d = append(r.d, d); r.mu.Unlock() }

func (r *delays) all() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.d...)
}

// Each exchange through the proxy takes at least its draw, and the draws
// cover their range: a lower bound, which no machine's speed can break; the
// upper one is only there to catch a proxy that holds bytes forever.
func TestDelayEachExchange(t *testing.T) {
	t.Parallel()
	const lo, hi = 5 * time.Millisecond, 40 * time.Millisecond
	var rec delays
	p, err := slowlink.New(echo(t), slowlink.Options{MinDelay: lo, MaxDelay: hi, Seed: 1, OnDelay: rec.add})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	const n = 40
	var took []time.Duration
	for i := range n {
		msg := fmt.Sprintf("ping %d\n", i)
		start := time.Now()
		_, err := io.WriteString(c, msg)
		require.NoError(t, err)
		got, err := r.ReadString('\n')
		require.NoError(t, err)
		took = append(took, time.Since(start))
		require.Equal(t, msg, got)
	}
	drawn := rec.all()
	require.Len(t, drawn, n, "one draw per exchange")
	shortest, longest := hi, lo
	for i, d := range drawn {
		assert.GreaterOrEqual(t, d, lo, "draw %d", i)
		assert.LessOrEqual(t, d, hi, "draw %d", i)
		assert.GreaterOrEqual(t, took[i], d, "exchange %d took less than its delay", i)
		assert.Less(t, took[i], d+10*time.Second, "exchange %d", i)
		shortest, longest = min(shortest, d), max(longest, d)
	}
	// 40 uniform draws all in one half of the range would be a broken draw
	// (the seed makes it the same every run).
	assert.Less(t, shortest, lo+(hi-lo)/2)
	assert.Greater(t, longest, lo+(hi-lo)/2)
}

// drawsOf makes n one-byte exchanges through a proxy with opts to an echo
// server, one after another, and returns the request delays it drew.
func drawsOf(t *testing.T, opts slowlink.Options, n int) []time.Duration {
	t.Helper()
	var rec delays
	opts.OnDelay = rec.add
	p, err := slowlink.New(echo(t), opts)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 1)
	for range n {
		_, err := c.Write([]byte{'x'})
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	return rec.all()
}

// The same seed draws the same delays.
func TestDelaysFollowTheSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []time.Duration {
		return drawsOf(t, slowlink.Options{MaxDelay: time.Millisecond, Seed: seed}, 10)
	}
	assert.Equal(t, run(7), run(7))
	assert.NotEqual(t, run(7), run(8))
}

// stamper starts a loopback server that writes back every line it reads,
// and sends on arrived when each line arrived, before writing it back.
func stamper(t *testing.T) (addr string, arrived <-chan time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ch := make(chan time.Time, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					ch <- time.Now()
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// Each leg of an exchange takes at least its direction's least delay: the
// request from the client's write to the server's read, the reply from the
// server's write to the client's read. Only lower bounds, which no
// machine's speed can break; the draws are seeded, so the check that some
// reply waited past the middle of its range is the same every run.
func TestDelayReplies(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		name string
		opts slowlink.Options
	}{
		{"replies", slowlink.Options{MinReplyDelay: 20 * ms, MaxReplyDelay: 60 * ms, Seed: 1}},
		{"max below min", slowlink.Options{MinReplyDelay: 30 * ms, MaxReplyDelay: 10 * ms, Seed: 1}},
		{"both ways", slowlink.Options{MinDelay: 10 * ms, MaxDelay: 30 * ms, MinReplyDelay: 20 * ms, MaxReplyDelay: 60 * ms, Seed: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, arrived := stamper(t)
			var rec delays
			opts := tt.opts
			opts.OnDelay = rec.add
			p, err := slowlink.New(addr, opts)
			require.NoError(t, err)
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			require.NoError(t, err)
			defer c.Close()
			r := bufio.NewReader(c)
			const n = 20
			lo, hi := opts.MinReplyDelay, max(opts.MaxReplyDelay, opts.MinReplyDelay)
			longest := time.Duration(0)
			for i := range n {
				msg := fmt.Sprintf("ping %d\n", i)
				sent := time.Now()
				_, err := io.WriteString(c, msg)
				require.NoError(t, err)
				got, err := r.ReadString('\n')
				require.NoError(t, err)
				back := time.Now()
				require.Equal(t, msg, got)
				at := <-arrived
				assert.GreaterOrEqual(t, at.Sub(sent), opts.MinDelay, "request %d reached the server early", i)
				assert.GreaterOrEqual(t, back.Sub(at), lo, "reply %d came back early", i)
				longest = max(longest, back.Sub(at))
			}
			if hi > lo {
				assert.Greater(t, longest, lo+(hi-lo)/2, "no reply waited past the middle of its range")
			}
			drawn := rec.all()
			require.Len(t, drawn, n, "one request draw per exchange: replies are not reported")
			for i, d := range drawn {
				assert.GreaterOrEqual(t, d, opts.MinDelay, "request draw %d", i)
				assert.LessOrEqual(t, d, max(opts.MaxDelay, opts.MinDelay), "request draw %d", i)
			}
		})
	}
}

// Reply delays draw from a stream of their own: the requests draw what
// they drew before replies could be delayed (the golden values are those
// draws for seed 7), with reply delays or without.
func TestRequestDrawsIgnoreReplyDelays(t *testing.T) {
	t.Parallel()
	run := func(opts slowlink.Options) []time.Duration { return drawsOf(t, opts, 5) }
	want := []time.Duration{510758, 261703, 366884, 692638, 809877}
	assert.Equal(t, want, run(slowlink.Options{MaxDelay: time.Millisecond, Seed: 7}), "requests only")
	assert.Equal(t, want, run(slowlink.Options{MaxDelay: time.Millisecond, MaxReplyDelay: time.Millisecond, Seed: 7}), "with reply delays")
}

// The zero Options forward both ways without holding bytes back: every
// draw is zero and every exchange comes back whole. The time bound is only
// there to catch a proxy that holds bytes forever.
func TestZeroOptionsForwardAtOnce(t *testing.T) {
	t.Parallel()
	var rec delays
	p, err := slowlink.New(echo(t), slowlink.Options{OnDelay: rec.add})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	for i := range 20 {
		msg := fmt.Sprintf("ping %d\n", i)
		start := time.Now()
		_, err := io.WriteString(c, msg)
		require.NoError(t, err)
		got, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, msg, got)
		assert.Less(t, time.Since(start), 10*time.Second, "exchange %d", i)
	}
	for i, d := range rec.all() {
		assert.Zero(t, d, "draw %d", i)
	}
}

// Bytes sent one after another without waiting for replies, each chunk
// with its own delay in each direction, come back in the order they were
// sent.
func TestOrderKeptPerConnection(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	tests := []struct {
		name string
		opts slowlink.Options
	}{
		{"requests", slowlink.Options{MaxDelay: d, Seed: 3}},
		{"replies", slowlink.Options{MaxReplyDelay: d, Seed: 3}},
		{"both ways", slowlink.Options{MaxDelay: d, MaxReplyDelay: d, Seed: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := slowlink.New(echo(t), tt.opts)
			require.NoError(t, err)
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			require.NoError(t, err)
			defer c.Close()
			var want []byte
			go func() {
				for i := range 200 {
					_, _ = fmt.Fprintf(c, "%d,", i)
					if i%10 == 0 {
						time.Sleep(time.Millisecond) // separate chunks, separate draws
					}
				}
			}()
			for i := range 200 {
				want = fmt.Appendf(want, "%d,", i)
			}
			got := make([]byte, len(want))
			_, err = io.ReadFull(c, got)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// A reply's chunks, written by the server one after another with their own
// draws, reach the client in the order the server wrote them.
func TestReplyOrderKept(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	const n = 200
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for i := range n {
			if _, err := fmt.Fprintf(c, "%d,", i); err != nil {
				return
			}
			time.Sleep(200 * time.Microsecond) // separate chunks, separate draws
		}
	}()
	p, err := slowlink.New(ln.Addr().String(), slowlink.Options{MaxReplyDelay: 20 * time.Millisecond, Seed: 5})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	var want []byte
	for i := range n {
		want = fmt.Appendf(want, "%d,", i)
	}
	got, err := io.ReadAll(c) // to the end: the proxy closes c once the chunks before the server's close are written
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
}

// Drop closes the connections through the proxy and refuses new ones until
// its time is up, then lets them through again on the same address. What
// is checked holds at any machine speed: no connection is accepted before
// the drop's end, and the link does come back.
func TestDropRefusesThenComesBack(t *testing.T) {
	t.Parallel()
	const down = 500 * time.Millisecond
	p, err := slowlink.New(echo(t), slowlink.Options{})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("a"))
	require.NoError(t, err)
	buf := make([]byte, 1)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)

	dropped := time.Now()
	back := p.Drop(down)
	_, err = io.ReadFull(c, buf)
	assert.Error(t, err, "the open connection was closed")

	refused := 0
	for giveUp := dropped.Add(30 * time.Second); ; {
		tried := time.Now()
		d, err := net.Dial("tcp", p.Addr())
		if err == nil {
			// Connected: the drop must be over.
			assert.GreaterOrEqual(t, tried.Sub(dropped), down, "connected during the drop")
			_, err = d.Write([]byte("b"))
			require.NoError(t, err)
			_, err = io.ReadFull(d, buf)
			require.NoError(t, err)
			assert.Equal(t, "b", string(buf))
			d.Close()
			break
		}
		assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial during the drop: %v", err)
		refused++
		require.True(t, time.Now().Before(giveUp), "the link never came back")
		time.Sleep(10 * time.Millisecond)
	}
	assert.Positive(t, refused, "no connection was refused")
	require.NoError(t, <-back)
}

// Cut holds until Restore.
func TestCutHoldsUntilRestore(t *testing.T) {
	t.Parallel()
	p, err := slowlink.New(echo(t), slowlink.Options{})
	require.NoError(t, err)
	defer p.Close()
	p.Cut()
	_, err = net.Dial("tcp", p.Addr())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.NoError(t, p.Restore())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	c.Close()
}
