package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/retryriver"
)

type pgxTx = pgx.Tx

// metadataKey is where a drill job records the idempotency key it sent.
const metadataKey = "notify_key"

// notifyArgs is one notification. Its idempotency key is not in its
// arguments: the worker derives it from the job (retryriver.IdempotencyKey),
// the same on every attempt and after a crash, as a real worker would.
type notifyArgs struct {
	N int `json:"n"` // its number in the drill, for a reader of the table
}

func (notifyArgs) Kind() string { return "notify" }

// notifyWorker sends a notification to the provider, once per attempt.
type notifyWorker struct {
	river.WorkerDefaults[notifyArgs]
	client *http.Client
	url    string
}

func (w *notifyWorker) Work(ctx context.Context, job *river.Job[notifyArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, nil)
	if err != nil {
		return retry.Permanent(err)
	}
	key := retryriver.IdempotencyKey(job.JobRow)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set(attemptHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	// The drill's check reads which key each job sent from its metadata.
	_ = river.MetadataSet(ctx, metadataKey, key)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return retry.CheckResponse(resp)
}

// workerConfig is what a worker process needs: where the jobs are, where the
// provider is, and which policy runs them.
type workerConfig struct {
	postgres     bool
	dsn, schema  string
	providerURL  string
	scale        float64
	riverDefault bool // River's own retry policy instead of retryriver's
	workers      int
	procs        int // worker processes in the fleet, this one included
	limiter      limiterConfig
}

func (c workerConfig) args() []string {
	a := []string{"-dsn", c.dsn, "-provider", c.providerURL, "-scale", fmt.Sprint(c.scale), "-workers", fmt.Sprint(c.workers),
		"-procs", fmt.Sprint(c.procs)}
	a = append(a, c.limiter.args()...)
	if c.postgres {
		a = append(a, "-schema", c.schema)
	}
	if c.riverDefault {
		a = append(a, "-policy", "river")
	}
	return a
}

func parseWorkerConfig(args []string) (workerConfig, error) {
	var c workerConfig
	fs := flag.NewFlagSet("outage worker", flag.ContinueOnError)
	fs.StringVar(&c.dsn, "dsn", "", "")
	fs.StringVar(&c.schema, "schema", "", "")
	fs.StringVar(&c.providerURL, "provider", "", "")
	fs.Float64Var(&c.scale, "scale", 1, "")
	fs.IntVar(&c.workers, "workers", 500, "")
	fs.IntVar(&c.procs, "procs", 1, "")
	fs.StringVar(&c.limiter.kind, "limiter", localLimiter, "")
	fs.StringVar(&c.limiter.url, "limiter-url", "", "")
	fs.StringVar(&c.limiter.schema, "limiter-schema", "", "")
	fs.StringVar(&c.limiter.name, "limit-name", "", "")
	fs.Float64Var(&c.limiter.fallback, "fallback", 0, "")
	fs.DurationVar(&c.limiter.timeout, "store-timeout", 0, "")
	policy := fs.String("policy", "retry", "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.postgres = c.schema != ""
	c.riverDefault = *policy == "river"
	return c, nil
}

// workerEnv marks a process started by the drill as one of its workers.
const workerEnv = "RETRYRIVER_OUTAGE_WORKER"

// workerMain is the worker process: it works jobs until it is interrupted
// (or killed, in the crash drill).
func workerMain(args []string) int {
	c, err := parseWorkerConfig(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := work(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "outage worker:", err)
		return 1
	}
	return 0
}

// riverConfig returns the River configuration of the drill's workers, whose
// attempts lim paces.
func riverConfig(c workerConfig, p params, lim retry.Limiter) *river.Config {
	transport := &http.Transport{MaxIdleConnsPerHost: c.workers, IdleConnTimeout: time.Minute}
	workers := river.NewWorkers()
	river.AddWorker(workers, &notifyWorker{client: &http.Client{Transport: transport}, url: c.providerURL})
	// A job is rescued when its worker died: after its timeout, plus the
	// longest a job can queue for the limiter (every worker slot waiting),
	// plus a margin for a process stalled by a loaded machine; earlier, a
	// live job would run twice (the provider's key would absorb it, and
	// the middleware would mark it, but it is not the drill's subject).
	// Under 10 s in all with one process, so that the new worker process of
	// the crash drill rescues the dead one's jobs as soon as it is the
	// leader (the dead leader's lease lasts 15 s; River's rescuer runs when a
	// client becomes the leader and then every 30 s). With a limit shared by
	// several processes, every worker slot of the fleet queues for it.
	queueing := time.Duration(c.limiter.queueing(p, max(c.procs, 1), c.workers) * float64(time.Second))
	cfg := &river.Config{
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.workers}},
		Workers:              workers,
		JobTimeout:           p.attemptTimeout,
		RescueStuckJobsAfter: p.attemptTimeout + queueing + 5*time.Second,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    50 * time.Millisecond,
		Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Schema:               c.schema,
	}
	if c.riverDefault {
		cfg.MaxAttempts = p.maxAttempts // River's schedule, River's lack of limits; the same attempts
		return cfg
	}
	pol := p.policy()
	pol.Limiter = lim
	return retryriver.New(pol).Config(cfg)
}

// work runs a River client with the drill's workers until ctx ends.
func work(ctx context.Context, c workerConfig) error {
	p, err := paramsFor(c.scale)
	if err != nil {
		return err
	}
	lim, closeLimiter, err := c.limiter.limiter(ctx, p)
	if err != nil {
		return err
	}
	defer closeLimiter()
	cfg := riverConfig(c, p, lim)
	var client interface {
		Start(context.Context) error
		Stop(context.Context) error
		StopAndCancel(context.Context) error
	}
	if c.postgres {
		pool, err := pgxpool.New(ctx, c.dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err = river.NewClient(riverpgxv5.New(pool), cfg)
		if err != nil {
			return err
		}
	} else {
		var db *sql.DB
		db, err = sqliteDB(c.dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		client, err = river.NewClient(riversqlite.New(db), cfg)
		if err != nil {
			return err
		}
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	return stop(client)
}

// stop stops client and returns only once it has stopped, since the
// database it uses is closed next (a client still running would log
// "sql: database is closed" for as long as it runs). Running attempts get
// 10 s to finish; then River cancels their contexts, which the worker and
// the middleware's limiter wait honour, and waits for them and for its own
// last writes.
func stop(client interface {
	Stop(context.Context) error
	StopAndCancel(context.Context) error
}) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := client.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = client.StopAndCancel(context.Background())
	}
	return err
}
