package retrypg_test

// The transfer workload: 16 goroutines making 2,000 SERIALIZABLE transfers
// between 10 accounts, each a read-modify-write (read both balances, write
// both new balances, record the transfer), with conflicts and deadlocks
// provoked. It runs through retrypg.Tx, through retrysql.Tx on pgx's
// database/sql driver, and through hand-written loops that retry the failed
// statement, to show what they get wrong.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed93a044d1/retry"
)

const (
	accounts       = 10
	transfers      = 2000
	workers        = 16
	startBalance   = 1_000_000
	transferSchema = `CREATE TABLE account (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO account SELECT g, 1000000 FROM generate_series(0, 9) g;
CREATE TABLE transfer (id int PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount bigint NOT NULL)`
	readBalances     = `SELECT (SELECT balance FROM account WHERE id = $1), (SELECT balance FROM account WHERE id = $2)`
	setBalance       = `UPDATE account SET balance = $2 WHERE id = $1`
	recordTransfer   = `INSERT INTO transfer (id, src, dst, amount) VALUES ($1, $2, $3, $4)`
	provokedTransfer = workers // the first round, one transfer per worker
)

// transferSpec is one transfer. hook, if set, is called on its first
// attempt after the read (step 1) and after the first write (step 2).
type transferSpec struct {
	id, from, to int
	amount       int64
	hook         func(step int)
}

// plan returns each worker's transfers. The first round, one per worker,
// provokes conflicts for certain: every worker reads, then waits until all
// have read before writing; workers 0 and 1 transfer 0->1 and 1->0 and
// each waits, holding its first row, for the other to hold its own, so one
// of them is a deadlock victim (40P01); workers 2 and 3 both transfer 2->3,
// so the one whose write waits for the other's fails when that commits
// (40001, a concurrent update); workers 4 to 15 share accounts 4 to 9. The
// round ends before the rest begin, so that no later transfer can wait on a
// row a worker holds while it waits for the others. The rest are random,
// from a fixed seed, between any two accounts.
func plan() (first []transferSpec, rest [][]transferSpec) {
	var read, held sync.WaitGroup
	read.Add(workers)
	held.Add(2)
	first = make([]transferSpec, workers)
	for w := range workers {
		s := transferSpec{id: w, amount: int64(w + 1)}
		switch {
		case w < 2:
			s.from, s.to = w, 1-w
		case w < 4:
			s.from, s.to = 2, 3
		default:
			s.from, s.to = 4+w%6, 4+(w+1)%6
		}
		s.hook = func(step int) {
			switch {
			case step == 1:
				read.Done()
				read.Wait()
			case step == 2 && w < 2:
				held.Done()
				held.Wait()
			}
		}
		first[w] = s
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rest = make([][]transferSpec, workers)
	for id := workers; id < transfers; id++ {
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(accounts-1)) % accounts
		w := id % workers
		rest[w] = append(rest[w], transferSpec{id: id, from: from, to: to, amount: 1 + rng.Int64N(100)})
	}
	return first, rest
}

// onFirstAttempt returns s's hook, to be called by every attempt, which
// passes the calls of the first attempt to s.hook and drops the others.
func onFirstAttempt(s transferSpec) func(step int) {
	if s.hook == nil {
		return func(int) {}
	}
	attempt := 0
	return func(step int) {
		if step == 1 {
			attempt++
		}
		if attempt == 1 {
			s.hook(step)
		}
	}
}

// runResult is what a run of the workload did.
type runResult struct {
	errs    []error // of the transfers that failed
	retries map[string]int
	maxTry  int // the most attempts one transfer took
	wall    time.Duration
}

// runTransfers makes the planned transfers with do, the first round then
// the rest, and returns what happened. do gets, for each transfer, an
// Observe for its policy that counts its retries and attempts.
func runTransfers(t *testing.T, do func(ctx context.Context, s transferSpec, observe func(context.Context, retry.Event)) error) runResult {
	first, rest := plan()
	var mu sync.Mutex
	res := runResult{retries: map[string]int{}}
	one := func(ctx context.Context, s transferSpec) {
		attempts := 0
		err := do(ctx, s, countRetries(&mu, res.retries, &attempts))
		mu.Lock()
		defer mu.Unlock()
		res.maxTry = max(res.maxTry, attempts)
		if err != nil {
			res.errs = append(res.errs, err)
		}
	}
	ctx := t.Context()
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range first {
		wg.Go(func() { one(ctx, s) })
	}
	wg.Wait()
	for _, specs := range rest {
		wg.Go(func() {
			for _, s := range specs {
				one(ctx, s)
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	return res
}

// countRetries returns an Observe for one call that counts its retries by
// SQLSTATE into retries, guarded by mu, and its attempts into *attempts.
func countRetries(mu *sync.Mutex, retries map[string]int, attempts *int) func(context.Context, retry.Event) {
	return func(_ context.Context, e retry.Event) {
		if e.Done {
			*attempts = e.Attempt
		}
		if !e.Retry {
			return
		}
		state := sqlState(e.Err)
		if state == "" {
			state = "other: " + e.Err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		retries[state]++
	}
}

// transferPolicy retries a transfer until it commits, with jittered
// backoff so that conflicting transfers spread out.
func transferPolicy(observe func(context.Context, retry.Event)) retry.Policy {
	return retry.Policy{
		MaxAttempts: 100,
		Backoff:     retry.Exponential{Base: time.Millisecond, Cap: 50 * time.Millisecond},
		Observe:     observe,
	}
}

// ledger is the database's state after a run.
type ledger struct {
	balances   [accounts]int64
	total      int64
	recorded   int
	consistent bool // each balance is its start plus what the recorded transfers moved
}

func readLedger(t *testing.T, d *database) ledger {
	t.Helper()
	pool := d.pool("", 2)
	ctx := t.Context()
	var l ledger
	rows, err := pool.Query(ctx, `SELECT id, balance FROM account ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int
		var b int64
		require.NoError(t, rows.Scan(&id, &b))
		l.balances[id] = b
		l.total += b
	}
	require.NoError(t, rows.Err())
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM transfer`).Scan(&l.recorded))
	var mismatched int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM account a
		WHERE a.balance <> 1000000
			- coalesce((SELECT sum(amount) FROM transfer WHERE src = a.id), 0)
			+ coalesce((SELECT sum(amount) FROM transfer WHERE dst = a.id), 0)`).Scan(&mismatched))
	l.consistent = mismatched == 0
	return l
}

// requireAllCommittedOnce checks a run through a whole-transaction helper.
func requireAllCommittedOnce(t *testing.T, d *database, res runResult, label string) {
	t.Helper()
	for _, err := range res.errs {
		require.NoError(t, err)
	}
	l := readLedger(t, d)
	assert.Equal(t, transfers, l.recorded, "every transfer committed")
	assert.Equal(t, int64(accounts*startBalance), l.total, "total balance")
	assert.True(t, l.consistent, "every balance agrees with the recorded transfers")
	assert.Positive(t, res.retries["40P01"], "the provoked deadlock was retried: %v", res.retries)
	assert.Positive(t, res.retries["40001"], "the provoked serialization failure was retried: %v", res.retries)
	t.Logf("%s: %d transfers by %d goroutines in %v; retries %s; most attempts for one transfer: %d",
		label, l.recorded, workers, res.wall.Round(time.Millisecond), formatRetries(res.retries), res.maxTry)
}

func formatRetries(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
