package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed93a044d1/retry/internal/sim"
)

// points builds the five strategies' points at one client count from
// calls and seconds, in the order of sim.Strategies.
func points(calls [5]float64, secs [5]float64) []sim.Point {
	var out []sim.Point
	for i, st := range sim.Strategies() {
		out = append(out, sim.Point{Strategy: st.Name, Clients: 190, Calls: calls[i], Time: time.Duration(secs[i] * float64(time.Second))})
	}
	return out
}

// The study's own numbers at 190 clients: no backoff finishes first, and
// the sentences say why, on the chart too.
func TestContentionLessonsSayTheServerHasNoLimit(t *testing.T) {
	t.Parallel()
	// exponential, full, equal, decorrelated, none
	l := contentionLessons(190, points([5]float64{5177, 1770, 1759, 2432, 7996}, [5]float64{101.3, 7.4, 9.4, 7.8, 3.5}))
	assert.Equal(t, "Each write call is load on the server, and jitter cuts it: at 190 clients, full jitter 1,770, equal jitter 1,759, "+
		"decorrelated 2,432; exponential without jitter 5,177 and no backoff 7,996. Without jitter, clients that collided wait the same "+
		"time and collide again.", l.calls)
	assert.Equal(t, "No backoff finishes first (3.5 s at 190 clients, against 7.4 s for full jitter, the fastest that backs off) only "+
		"because this model's server has no capacity limit: the 7,996 calls it sends, 4.5 times full jitter's, cost it nothing. "+
		"A real server slows down or refuses calls under such a burst.", l.timeChart)
	assert.True(t, strings.HasPrefix(l.time, l.timeChart+" "), "the chart's subtitle is the first part of the printed lesson")
	assert.Contains(t, l.time, "Exponential backoff without jitter takes 101.3 s, 13.7 times as long as full jitter's 7.4 s")
	assert.Contains(t, l.conclusion, "Full jitter sends about the fewest calls (1,770; the fewest, equal jitter's, is 1,759)")
	assert.Contains(t, l.conclusion, "finishes first of the strategies that back off")
	assert.Contains(t, contentionNote, "has no capacity limit")
}

// When the numbers go another way, the sentences do not claim what they
// no longer show.
func TestContentionLessonsFollowTheNumbers(t *testing.T) {
	t.Parallel()
	// No backoff slowest, decorrelated fastest and fewest, jitter not below the rest.
	l := contentionLessons(10, points([5]float64{50, 40, 42, 37, 41}, [5]float64{3.7, 0.46, 0.74, 0.43, 5}))
	assert.True(t, strings.HasPrefix(l.calls, "At 10 clients, write calls per episode: full jitter 40,"), l.calls)
	assert.NotContains(t, l.time, "capacity")
	assert.True(t, strings.HasPrefix(l.time, "decorrelated finishes first: 0.4 s at 10 clients."), l.time)
	assert.Contains(t, l.conclusion, "decorrelated sends the fewest calls (37) and decorrelated finishes first")
	assert.NotContains(t, l.conclusion, "library's default")
}
