package retry

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const maxDuration = time.Duration(math.MaxInt64)
	tests := []struct {
		name      string
		wait, min time.Duration
		deadline  time.Time
		want      bool
	}{
		{"no deadline", maxDuration, maxDuration, time.Time{}, true},
		{"room left", time.Second, time.Second, now.Add(3 * time.Second), true},
		{"one nanosecond left", time.Second, time.Second, now.Add(2*time.Second + 1), true},
		{"ends exactly at the deadline", time.Second, time.Second, now.Add(2 * time.Second), false},
		{"zero wait at the deadline", 0, 0, now, false},
		{"deadline passed", 0, 0, now.Add(-time.Hour), false},
		{"huge wait does not wrap", maxDuration, maxDuration, now.Add(time.Hour), false},
		{"huge minimum does not wrap", time.Second, maxDuration, now.Add(time.Hour), false},
		{"negative values count as 0", -time.Hour, -time.Hour, now.Add(1), true},
		{"far deadline", maxDuration - 1, 0, now.Add(maxDuration), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fits(now, tt.wait, tt.min, tt.deadline)
			assert.Equal(t, tt.want, got, "fits(wait=%v, min=%v)", tt.wait, tt.min)
		})
	}
}

func TestPassed(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()
	assert.False(t, passed(ctx, now))
	assert.True(t, passed(ctx, now.Add(time.Hour)), "the deadline counts as passed before its timer fires")
	assert.Equal(t, context.DeadlineExceeded, stopCause(ctx), "a passed deadline whose timer has not fired")
	cancel()
	assert.True(t, passed(ctx, now))
	assert.Equal(t, context.Canceled, stopCause(ctx))
	assert.False(t, passed(context.Background(), now))
}

func TestAttemptContext(t *testing.T) {
	t.Parallel()
	now := time.Now()
	parent := context.Background()

	ctx, cancel := attemptContext(parent, now, 0, time.Time{})
	assert.Equal(t, parent, ctx, "no timeout: the caller's context")
	assert.Nil(t, cancel)

	ctx, cancel = attemptContext(parent, now, time.Minute, now.Add(time.Minute))
	assert.Equal(t, parent, ctx, "the caller's deadline comes first or together: the caller's context")
	assert.Nil(t, cancel)

	ctx, cancel = attemptContext(parent, now, time.Minute, now.Add(time.Hour))
	defer cancel()
	d, ok := ctx.Deadline()
	assert.True(t, ok)
	assert.Equal(t, now.Add(time.Minute), d)

	ctx, cancel = attemptContext(parent, now, math.MaxInt64, time.Time{})
	defer cancel()
	d, ok = ctx.Deadline()
	assert.True(t, ok)
	assert.True(t, d.After(now), "a huge timeout does not wrap into the past")
}
