package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
	"github.com/seed93a044d1/retry/retrypg"
	"github.com/seed93a044d1/retry/retryredis"
)

// The kinds of limiter the drill runs with (-limiter): each worker process
// its own rate.Limiter, or one limit shared by every worker process through
// PostgreSQL (retrypg) or Redis (retryredis).
const (
	localLimiter = "local"
	pgLimiter    = "pg"
	redisLimiter = "redis"
)

// limiterConfig is how a worker process makes its limiter.
type limiterConfig struct {
	kind     string        // localLimiter, pgLimiter or redisLimiter
	url      string        // the shared limit's store: PostgreSQL (through the drill's cut when it kills it) or Redis
	schema   string        // PostgreSQL: the drill's schema, where the limiter's table goes (dropped with it)
	name     string        // the limit's name on the store: one per run, so that runs never share a schedule
	fallback float64       // fleet.Options.Fallback: 0 fails closed
	timeout  time.Duration // fleet.Options.Timeout: 0 is fleet's default, 100ms
}

func (c limiterConfig) shared() bool { return c.kind == pgLimiter || c.kind == redisLimiter }

func (c limiterConfig) args() []string {
	if !c.shared() {
		return nil
	}
	return []string{"-limiter", c.kind, "-limiter-url", c.url, "-limiter-schema", c.schema, "-limit-name", c.name,
		"-fallback", fmt.Sprint(c.fallback), "-store-timeout", c.timeout.String()}
}

// limiter returns the worker process's limiter for p, and what closes the
// connections it opened. A shared one waits at most c.timeout (by default
// fleet's, 100ms) per round trip, and fails closed, or falls back to a local limiter at
// the share c.fallback of the rate, while its store is down (see
// [fleet.Options]).
func (c limiterConfig) limiter(ctx context.Context, p params) (retry.Limiter, func(), error) {
	opts := &fleet.Options{Fallback: c.fallback, Timeout: c.timeout}
	switch c.kind {
	case pgLimiter:
		cfg, err := pgxpool.ParseConfig(c.url)
		if err != nil {
			return nil, nil, fmt.Errorf("outage: the limiter's PostgreSQL URL: %w", err)
		}
		if c.schema != "" {
			cfg.ConnConfig.RuntimeParams["search_path"] = c.schema
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		lim, err := retrypg.NewLimiter(pool, c.name, rate.Limit(p.limit), p.burst, opts)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return lim, pool.Close, nil
	case redisLimiter:
		opt, err := redis.ParseURL(c.url)
		if err != nil {
			return nil, nil, fmt.Errorf("outage: the limiter's Redis URL: %w", err)
		}
		client := redis.NewClient(opt)
		lim, err := retryredis.NewLimiter(client, c.name, rate.Limit(p.limit), p.burst, opts)
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		return lim, func() { client.Close() }, nil
	default:
		return retry.RateLimiter(rate.NewLimiter(rate.Limit(p.limit), p.burst)), func() {}, nil
	}
}

// queueing returns the longest a job can wait for the limiter in a worker
// process of procs, each with workers River workers: every worker slot of
// the fleet waiting its turn at the shared rate, or of its own process at
// its own rate (a local limiter's, or a shared limiter's fallback while the
// store is down).
func (c limiterConfig) queueing(p params, procs, workers int) float64 {
	q := float64(workers) / p.limit
	if c.shared() {
		q = float64(procs*workers) / p.limit
		if c.fallback > 0 {
			q = max(q, float64(workers)/(p.limit*c.fallback))
		}
	}
	if math.IsInf(q, 0) || math.IsNaN(q) {
		return 0
	}
	return q
}

// describe says what limits the fleet's attempts, for the report.
func (c limiterConfig) describe(p params, procs int) string {
	switch c.kind {
	case pgLimiter, redisLimiter:
		store := "PostgreSQL (retrypg.NewLimiter)"
		if c.kind == redisLimiter {
			store = "Redis (retryredis.NewLimiter)"
		}
		fb := "fails closed while its store is down"
		if c.fallback > 0 {
			fb = fmt.Sprintf("falls back to %g of the rate in each process while its store is down", c.fallback)
		}
		return fmt.Sprintf("one limit of %g/s, burst %d, shared by the %d processes through %s; %s", p.limit, p.burst, procs, store, fb)
	default:
		if procs == 1 {
			return fmt.Sprintf("rate.NewLimiter(%g, %d)", p.limit, p.burst)
		}
		return fmt.Sprintf("rate.NewLimiter(%g, %d) in each of the %d processes", p.limit, p.burst, procs)
	}
}
