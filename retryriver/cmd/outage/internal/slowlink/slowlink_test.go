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

// The same seed draws the same delays.
func TestDelaysFollowTheSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []time.Duration {
		var rec delays
		p, err := slowlink.New(echo(t), slowlink.Options{MaxDelay: time.Millisecond, Seed: seed, OnDelay: rec.add})
		require.NoError(t, err)
		defer p.Close()
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		buf := make([]byte, 1)
		for range 10 {
			_, err := c.Write([]byte{'x'})
			require.NoError(t, err)
			_, err = io.ReadFull(c, buf)
			require.NoError(t, err)
		}
		return rec.all()
	}
	assert.Equal(t, run(7), run(7))
	assert.NotEqual(t, run(7), run(8))
}

// Bytes sent one after another without waiting for replies, each with its
// own delay, come back in the order they were sent.
func TestOrderKeptPerConnection(t *testing.T) {
	t.Parallel()
	p, err := slowlink.New(echo(t), slowlink.Options{MaxDelay: 20 * time.Millisecond, Seed: 3})
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
