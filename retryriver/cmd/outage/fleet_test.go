package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet drill, small: 100 jobs on four worker processes of 10 River
// workers each, on one queue (PostgreSQL, or one SQLite file), with a
// limiter in each process or one limit shared through PostgreSQL or Redis,
// and the shared limit's store taken away for 3s once 30% of the jobs are
// final. Whatever the
// machine's speed: every job accounted for as the single-process drill's
// are (check), none cancelled for the store's outage (a job whose limiter
// fails closed waits, snoozed); failing closed, no attempt reaches the
// provider from a second after the store went until it is back (the slots
// booked before, 40 workers' worth at 200/s, pass in 0.2s); and no sliding
// second above what the limiters allow, plus one request per worker on its
// way. The full-size figures are in the README.
func TestFleetDrill(t *testing.T) {
	t.Parallel()
	pg := os.Getenv("RETRY_POSTGRES_URL")
	const procs, workers, down = 4, 10, 3 * time.Second
	tests := []struct {
		name      string
		postgres  bool // River's queue on PostgreSQL, else on SQLite
		limiter   string
		killStore time.Duration
		fallback  float64
	}{
		{"sqlite, local", false, localLimiter, 0, 0},
		{"sqlite, redis killed, fail closed", false, redisLimiter, down, 0},
		{"postgres, local", true, localLimiter, 0, 0},
		{"postgres, pg", true, pgLimiter, 0, 0},
		{"postgres, redis", true, redisLimiter, 0, 0},
		{"postgres, pg cut, fail closed", true, pgLimiter, down, 0},
		{"postgres, pg cut, fallback 1/4", true, pgLimiter, down, 0.25},
		{"postgres, redis killed, fail closed", true, redisLimiter, down, 0},
		{"postgres, redis killed, fallback 1/4", true, redisLimiter, down, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.postgres && pg == "" {
				t.Skip("needs PostgreSQL: set RETRY_POSTGRES_URL, or run from the repository's root: " +
					"bash -c 'source .ci/postgres; start_postgres; source .ci/redis; start_redis; trap \"stop_redis; stop_postgres\" EXIT; cd retryriver && go test -run TestFleetDrill ./cmd/outage'")
			}
			c := config{scale: 0.01, workers: workers, seed: 1, stall: stall,
				procs: procs, limiter: tt.limiter, killStore: tt.killStore, fallback: tt.fallback}
			if tt.postgres {
				c.url = pg
			}
			if tt.limiter == redisLimiter {
				c.redisURL = os.Getenv("RETRY_REDIS_URL")
				if _, err := exec.LookPath("redis-server"); err != nil && (c.redisURL == "" || tt.killStore > 0) {
					t.Skip("needs the redis-server binary (apt-get install -y redis-server), to run a Redis of the drill's own")
				}
			}
			r, err := drill(t.Context(), c, testWriter{t})
			require.NoError(t, err)
			assertDrill(t, r)
			assert.Zero(t, r.final.cancelled, "jobs cancelled")
			p := r.p
			perProcess := p.limit + 2*float64(p.burst) // a late wake books again: a burst more
			bound := perProcess
			if tt.limiter == localLimiter {
				bound = procs * perProcess
			}
			if tt.fallback > 0 {
				// While store-booked slots last, the fallbacks' slots come
				// on top (see the README).
				bound += procs * (p.limit*tt.fallback + float64(p.burst))
			}
			assert.LessOrEqual(t, float64(r.peak), bound+procs*workers, "peak attempts per second")
			if tt.killStore == 0 {
				return
			}
			require.Positive(t, r.storeUp, "the store was never taken away")
			assert.Less(t, r.storeFinal, p.jobs, "jobs were left when the store went")
			assert.GreaterOrEqual(t, r.storeUp-r.storeDown, down, "how long the store was away")
			if tt.fallback == 0 {
				// More jobs were left than the fleet's workers hold slots
				// for: some had to wait for the store.
				assert.Greater(t, r.drain, r.storeUp, "the drill ended after the store came back")
				assert.Empty(t, window(r.provider.arrivals, r.storeDown+time.Second, r.storeUp),
					"attempts from a second after the store went until it came back, failing closed")
			}
		})
	}
}
