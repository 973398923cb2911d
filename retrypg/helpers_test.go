package retrypg_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
)

// postgresURL returns RETRY_POSTGRES_URL, or skips the test without it.
func postgresURL(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("RETRY_POSTGRES_URL")
	if dsn == "" {
		t.Skip("RETRY_POSTGRES_URL is not set: run `bash .ci/test` from the repository root, which starts a throwaway PostgreSQL")
	}
	return dsn
}

// database is a schema of the test's own on the PostgreSQL of
// RETRY_POSTGRES_URL, dropped when the test ends, reached directly or
// through a proxy.
type database struct {
	t      testing.TB
	url    string
	schema string
}

var schemas atomic.Int64

func newDatabase(t testing.TB) *database {
	t.Helper()
	dsn := postgresURL(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	schema := fmt.Sprintf("retrypg_%d_%d", os.Getpid(), schemas.Add(1))
	_, err = conn.Exec(context.Background(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return &database{t: t, url: dsn, schema: schema}
}

// config returns a connection config for the schema, through addr if it
// is not empty. Deadlocks are detected after 20ms instead of a second.
func (d *database) config(addr string) *pgx.ConnConfig {
	u, err := url.Parse(d.url)
	require.NoError(d.t, err)
	if addr != "" {
		u.Host = addr
	}
	cfg, err := pgx.ParseConfig(u.String())
	require.NoError(d.t, err)
	cfg.RuntimeParams["search_path"] = d.schema
	cfg.RuntimeParams["deadlock_timeout"] = "20ms"
	return cfg
}

// pool returns a pgx pool of up to maxConns connections to the schema,
// through addr if it is not empty.
func (d *database) pool(addr string, maxConns int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig("")
	require.NoError(d.t, err)
	cfg.ConnConfig = d.config(addr)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(d.t, err)
	d.t.Cleanup(pool.Close)
	return pool
}

// sqlDB returns a database/sql pool on pgx's stdlib driver, through addr if
// it is not empty.
func (d *database) sqlDB(addr string) *sql.DB {
	db := stdlib.OpenDB(*d.config(addr))
	d.t.Cleanup(func() { db.Close() })
	return db
}

// exec runs statements on a connection of its own.
func (d *database) exec(sql string, args ...any) {
	d.t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), d.config(""))
	require.NoError(d.t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), sql, args...)
	require.NoError(d.t, err)
}

// sqlState returns the SQLSTATE of the first PostgreSQL error in err's tree.
func sqlState(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// cutMode says what a commitCutter does with the next COMMIT.
type cutMode int32

const (
	pass        cutMode = iota // forward it, and everything else
	forwardThen                // forward it to the server, then close both connections: the reply is lost
	dropThen                   // close both connections without forwarding it: the server never sees it
)

// commitCutter is a TCP proxy on loopback between clients and PostgreSQL.
// It forwards bytes both ways, reading the client's side message by message
// (the frontend protocol: an untyped startup message, then a type byte and
// a length for each), and when armed, acts on the next simple-protocol
// COMMIT, which is how pgx sends one, and disarms. With dropCancels set it
// also drops every CancelRequest, as a cut network would: pgx sends one when
// it closes a broken connection, and it would cancel a COMMIT that is still
// running on the server.
type commitCutter struct {
	ln          net.Listener
	target      string
	mode        atomic.Int32
	cuts        atomic.Int32
	dropCancels atomic.Bool
	wg          sync.WaitGroup

	mu      sync.Mutex
	closers []func() // of every pair of connections
}

func newCommitCutter(t testing.TB, target string) *commitCutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &commitCutter{ln: ln, target: target}
	c.wg.Go(c.serve)
	t.Cleanup(func() {
		ln.Close()
		c.mu.Lock()
		for _, close := range c.closers {
			close()
		}
		c.mu.Unlock()
		c.wg.Wait()
	})
	return c
}

func (c *commitCutter) addr() string { return c.ln.Addr().String() }

// arm makes the proxy act on the next COMMIT.
func (c *commitCutter) arm(m cutMode) { c.mode.Store(int32(m)) }

func (c *commitCutter) serve() {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			client.Close()
			continue
		}
		// Both connections close when either direction ends, or at the
		// test's end.
		closeBoth := sync.OnceFunc(func() { client.Close(); server.Close() })
		c.mu.Lock()
		c.closers = append(c.closers, closeBoth)
		c.mu.Unlock()
		conns.Go(func() {
			defer closeBoth()
			_, _ = io.Copy(client, server)
		})
		conns.Go(func() {
			defer closeBoth()
			c.forward(client, server)
		})
	}
}

// forward copies the client's messages to the server until either side
// ends, or until it acts on a COMMIT.
func (c *commitCutter) forward(client, server net.Conn) {
	r := bufio.NewReader(client)
	startup := true
	for {
		var msg []byte
		var err error
		if startup {
			var code uint32
			msg, code, err = readStartup(r)
			startup = code == sslRequest || code == gssencRequest
			if code == cancelRequest && c.dropCancels.Load() {
				return
			}
		} else {
			msg, err = readMessage(r)
		}
		if err != nil {
			return
		}
		if !startup && isCommit(msg) {
			switch cutMode(c.mode.Swap(int32(pass))) {
			case forwardThen:
				// The client's side closes first, so that no reply the
				// server sends can reach it.
				c.cuts.Add(1)
				client.Close()
				_, _ = server.Write(msg)
				return
			case dropThen:
				c.cuts.Add(1)
				return
			}
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
	}
}

// The codes of the untyped messages that are not a StartupMessage.
const (
	cancelRequest = 80877102
	sslRequest    = 80877103 // followed by another untyped message
	gssencRequest = 80877104 // followed by another untyped message
)

// readStartup reads one untyped message, and returns its code: the
// protocol version of a StartupMessage, or one of the codes above.
func readStartup(r *bufio.Reader) (msg []byte, code uint32, err error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n < 8 || n > 1<<20 {
		return nil, 0, fmt.Errorf("proxy: startup message of %d bytes", n)
	}
	msg = make([]byte, n)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[8:]); err != nil {
		return nil, 0, err
	}
	return msg, binary.BigEndian.Uint32(head[4:]), nil
}

// readMessage reads one typed message: its type byte, length and body.
func readMessage(r *bufio.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return nil, fmt.Errorf("proxy: message of %d bytes", n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// isCommit reports whether msg is a simple Query whose text is COMMIT.
func isCommit(msg []byte) bool {
	if msg[0] != 'Q' {
		return false
	}
	text := strings.TrimSpace(string(bytes.TrimRight(msg[5:], "\x00")))
	return strings.EqualFold(strings.TrimSuffix(text, ";"), "commit")
}
