package retrysql_test

// bank is a small database/sql driver, written for this package's tests and
// examples because the standard library has none: an in-memory set of
// accounts with transactions that commit optimistically, as PostgreSQL's
// SERIALIZABLE does, and faults injected at chosen statements in the shapes
// real drivers report them. It implements database/sql/driver for real, so
// Tx runs on it exactly as on any driver; the tests against PostgreSQL live
// in the retrypg module.
//
// Statements, each with its arguments:
//
//	add <account string> <delta int64>   (Exec) adds delta to the account's balance
//	balance <account string>             (Query) one row: the balance
//	key <key string>                     (Exec) records an idempotency key; a key already there is a unique violation (23505)
//	haskey <key string>                  (Query, in a transaction or not) one row: whether the key is committed

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
)

// bank is the database: its state, what happened to it, and the faults to
// inject. It is a driver.Connector: sql.OpenDB(b) opens it.
type bank struct {
	mu       sync.Mutex
	balance  map[string]int64
	version  map[string]int // of each account: bumped by each commit that writes it
	keys     map[string]bool
	faults   []fault
	begins   int
	commits  int // applied commits
	rollback int
	txOpts   []driver.TxOptions
	open     int // connections open
}

// fault makes the next statement of its kind fail with err. For a commit,
// applied says whether the transaction was applied before the error (its
// reply lost) and block makes the commit wait for the transaction's context
// to end first.
type fault struct {
	stmt    string // "begin", "add", "balance", "key" or "commit"
	err     error
	applied bool
	block   bool
}

func newBank(balances map[string]int64) *bank {
	b := &bank{balance: map[string]int64{}, version: map[string]int{}, keys: map[string]bool{}}
	for k, v := range balances {
		b.balance[k] = v
	}
	return b
}

// inject queues faults, used in order, one statement each.
func (b *bank) inject(fs ...fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = append(b.faults, fs...)
}

// takeFault returns the first queued fault for stmt, if any; b.mu is held.
func (b *bank) takeFault(stmt string) (fault, bool) {
	for i, f := range b.faults {
		if f.stmt == stmt {
			b.faults = append(b.faults[:i], b.faults[i+1:]...)
			return f, true
		}
	}
	return fault{}, false
}

func (b *bank) get(account string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.balance[account]
}

// counts returns begins, applied commits and rollbacks.
func (b *bank) counts() (begins, commits, rollbacks int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.begins, b.commits, b.rollback
}

func (b *bank) Connect(context.Context) (driver.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open++
	return &bankConn{bank: b}, nil
}

func (b *bank) Driver() driver.Driver { return bankDriver{} }

type bankDriver struct{}

func (bankDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("bank: open with sql.OpenDB(newBank(...))")
}

// sqlError is shaped like pgx's *pgconn.PgError: a SQLSTATE from the server.
type sqlError string

func (e sqlError) Error() string    { return "bank: SQLSTATE " + string(e) }
func (e sqlError) SQLState() string { return string(e) }

// lostReply is shaped like pgx's error for a connection that closed after a
// statement was sent: "the request may have been sent".
type lostReply struct{}

func (lostReply) Error() string     { return "bank: connection closed before the reply" }
func (lostReply) SafeToRetry() bool { return false }

// bankConn is one connection. A connection that lost a reply is broken:
// database/sql discards it.
type bankConn struct {
	bank   *bank
	tx     *bankTx
	broken bool
}

func (c *bankConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("bank: prepared statements are not supported")
}

func (c *bankConn) Close() error {
	c.bank.mu.Lock()
	defer c.bank.mu.Unlock()
	c.bank.open--
	return nil
}

func (c *bankConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *bankConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b := c.bank
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.broken {
		return nil, driver.ErrBadConn
	}
	if f, ok := b.takeFault("begin"); ok {
		c.broke(f.err)
		return nil, f.err
	}
	b.begins++
	b.txOpts = append(b.txOpts, opts)
	c.tx = &bankTx{conn: c, ctx: ctx, seen: map[string]int{}, add: map[string]int64{}, keys: map[string]bool{}}
	return c.tx, nil
}

// broke marks the connection broken if err says it is.
func (c *bankConn) broke(err error) {
	var lost lostReply
	if errors.Is(err, driver.ErrBadConn) || errors.As(err, &lost) {
		c.broken = true
	}
}

func (c *bankConn) ResetSession(context.Context) error {
	if c.broken {
		return driver.ErrBadConn
	}
	return nil
}

func (c *bankConn) IsValid() bool { return !c.broken }

func (c *bankConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.bank.mu.Lock()
	defer c.bank.mu.Unlock()
	tx, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	switch query {
	case "add":
		account, delta, err := accountAndDelta(args)
		if err != nil {
			return nil, err
		}
		tx.touch(account)
		tx.add[account] += delta
	case "key":
		key, ok := argString(args)
		if !ok {
			return nil, errors.New("bank: key wants a key")
		}
		if c.bank.keys[key] || tx.keys[key] {
			tx.failed = true
			return nil, sqlError("23505")
		}
		tx.keys[key] = true
	default:
		return nil, fmt.Errorf("bank: unknown statement %q", query)
	}
	return driver.RowsAffected(1), nil
}

func (c *bankConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.bank.mu.Lock()
	defer c.bank.mu.Unlock()
	arg, ok := argString(args)
	if !ok {
		return nil, fmt.Errorf("bank: %s wants one argument", query)
	}
	if query == "haskey" { // outside a transaction too: committed keys only
		if c.broken {
			return nil, driver.ErrBadConn
		}
		if f, ok := c.bank.takeFault(query); ok {
			return nil, f.err
		}
		return &bankRows{value: c.bank.keys[arg]}, nil
	}
	tx, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	if query != "balance" {
		return nil, fmt.Errorf("bank: unknown query %q", query)
	}
	tx.touch(arg)
	return &bankRows{value: c.bank.balance[arg] + tx.add[arg]}, nil
}

// statement starts one statement in the connection's transaction: it
// applies the rules of a broken connection and of an aborted transaction,
// and a fault if one is queued. bank.mu is held.
func (c *bankConn) statement(ctx context.Context, query string) (*bankTx, error) {
	b := c.bank
	switch {
	case c.broken:
		return nil, driver.ErrBadConn
	case c.tx == nil:
		return nil, errors.New("bank: statements run only in a transaction")
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case c.tx.failed:
		return nil, sqlError("25P02") // in_failed_sql_transaction, as PostgreSQL says
	}
	if f, ok := b.takeFault(query); ok {
		c.tx.failed = true
		c.broke(f.err)
		return nil, f.err
	}
	return c.tx, nil
}

func accountAndDelta(args []driver.NamedValue) (string, int64, error) {
	if len(args) != 2 {
		return "", 0, errors.New("bank: add wants an account and a delta")
	}
	account, ok1 := args[0].Value.(string)
	delta, ok2 := args[1].Value.(int64)
	if !ok1 || !ok2 {
		return "", 0, errors.New("bank: add wants an account and a delta")
	}
	return account, delta, nil
}

func argString(args []driver.NamedValue) (string, bool) {
	if len(args) != 1 {
		return "", false
	}
	s, ok := args[0].Value.(string)
	return s, ok
}

// bankTx is a transaction: the versions of the accounts it has touched,
// its buffered writes, and the keys it recorded.
type bankTx struct {
	conn   *bankConn
	ctx    context.Context // BeginTx's, as a driver's Commit sees it
	seen   map[string]int
	add    map[string]int64
	keys   map[string]bool
	failed bool // a statement failed: only a rollback is possible
	ended  bool
}

// touch records the version of an account the first time the transaction
// reads or writes it; bank.mu is held.
func (tx *bankTx) touch(account string) {
	b := tx.conn.bank
	if _, ok := tx.seen[account]; !ok {
		tx.seen[account] = b.version[account]
	}
}

func (tx *bankTx) Commit() error {
	c := tx.conn
	b := c.bank
	b.mu.Lock()
	f, faulty := b.takeFault("commit")
	b.mu.Unlock()
	if faulty && f.block {
		<-tx.ctx.Done()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tx.ended, c.tx = true, nil
	if faulty {
		if f.applied {
			tx.apply()
		} else {
			b.rollback++
		}
		c.broke(f.err)
		return f.err
	}
	if tx.failed {
		b.rollback++
		return errors.New("bank: commit of a failed transaction rolled back")
	}
	for account, v := range tx.seen {
		if b.version[account] != v {
			b.rollback++
			return sqlError("40001") // another transaction changed what this one read
		}
	}
	for key := range tx.keys {
		if b.keys[key] {
			b.rollback++
			return sqlError("23505")
		}
	}
	tx.apply()
	return nil
}

// apply writes the transaction into the bank; bank.mu is held.
func (tx *bankTx) apply() {
	b := tx.conn.bank
	for account, delta := range tx.add {
		b.balance[account] += delta
		b.version[account]++
	}
	for key := range tx.keys {
		b.keys[key] = true
	}
	b.commits++
}

func (tx *bankTx) Rollback() error {
	b := tx.conn.bank
	b.mu.Lock()
	defer b.mu.Unlock()
	if tx.ended {
		return errors.New("bank: transaction already ended")
	}
	tx.ended, tx.conn.tx = true, nil
	b.rollback++
	if tx.conn.broken {
		return driver.ErrBadConn
	}
	return nil
}

type bankRows struct {
	value driver.Value
	done  bool
}

func (r *bankRows) Columns() []string { return []string{"balance"} }
func (r *bankRows) Close() error      { return nil }
func (r *bankRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = r.value
	return nil
}

// Interfaces the bank implements, so that a change that drops one fails to
// compile instead of changing how database/sql uses it.
var (
	_ driver.Connector       = (*bank)(nil)
	_ driver.ConnBeginTx     = (*bankConn)(nil)
	_ driver.ExecerContext   = (*bankConn)(nil)
	_ driver.QueryerContext  = (*bankConn)(nil)
	_ driver.SessionResetter = (*bankConn)(nil)
	_ driver.Validator       = (*bankConn)(nil)
)
