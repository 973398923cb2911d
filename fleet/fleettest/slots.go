package fleettest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed93a044d1/retry"
	"github.com/seed93a044d1/retry/fleet"
)

// TestSlotStore checks that stores made by newStore keep leases as
// [fleet.SlotStore] says: no more live leases than the limit, a release
// frees its place, a lease runs out at its expiry unless renewed, a lease
// dropped once it ran out is reported lost, and concurrent leases never
// exceed the limit. newStore must return a store on a limit that nothing
// else uses (a fresh name), each time it is called. The bounds on time
// allow for slow round trips (up to a second), not for a store whose clock
// jumps.
func TestSlotStore(t *testing.T, newStore func(t *testing.T) fleet.SlotStore) {
	t.Helper()
	t.Run("Limit", func(t *testing.T) {
		s := newStore(t)
		lease(t, s, "a", 2, time.Minute, true)
		lease(t, s, "b", 2, time.Minute, true)
		lease(t, s, "c", 2, time.Minute, false)
		if err := s.Release(t.Context(), "a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		lease(t, s, "c", 2, time.Minute, true)
		if err := s.Release(t.Context(), "never-leased"); err != nil {
			t.Errorf("Release of a lease the store does not hold = %v, want nil", err)
		}
		lease(t, s, "d", 3, time.Minute, true) // a limit is the caller's: the store keeps the leases only
	})
	t.Run("Expiry", func(t *testing.T) {
		s := newStore(t)
		const d = 300 * time.Millisecond
		start := time.Now()
		lease(t, s, "x", 1, d, true)
		waited := leaseWithin(t, s, "y", 1, time.Minute, d+time.Second)
		if waited < d-slotSlop {
			t.Errorf("a lease of %v was free again after %v", d, waited)
		}
		t.Logf("a lease of %v taken again %v after it was taken", d, time.Since(start))
	})
	t.Run("Renew", func(t *testing.T) {
		s := newStore(t)
		const d = 600 * time.Millisecond
		lease(t, s, "x", 1, d, true)
		for range 6 {
			time.Sleep(d / 4)
			lost, err := s.Renew(t.Context(), []string{"x", "unknown"}, d)
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if !slices.Equal(lost, []string{"unknown"}) {
				t.Fatalf("Renew(x, unknown) lost %q, want [unknown]", lost)
			}
			lease(t, s, "y", 1, d, false)
		}
		leaseWithin(t, s, "y", 1, d, d+time.Second)
	})
	t.Run("Lost", func(t *testing.T) {
		s := newStore(t)
		lease(t, s, "x", 1, 50*time.Millisecond, true)
		leaseWithin(t, s, "y", 1, time.Minute, time.Second) // drops x
		lost, err := s.Renew(t.Context(), []string{"x", "y"}, time.Minute)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if !slices.Equal(lost, []string{"x"}) {
			t.Errorf("Renew(x, y) lost %q, want [x]: a lease dropped once it ran out stays gone", lost)
		}
		lease(t, s, "z", 1, time.Minute, false)
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := newStore(t)
		const goroutines, each, limit = 8, 5, 5
		var ok atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					got, err := s.Lease(t.Context(), fmt.Sprintf("g%d-%d", g, i), limit, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if got {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := ok.Load(); n != limit {
			t.Errorf("%d of %d concurrent leases taken, want the limit, %d", n, goroutines*each, limit)
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.Lease(ctx, "x", 1, time.Minute); err == nil {
			t.Error("Lease with a cancelled context succeeded")
		}
	})
}

// slotSlop is how early a lease may look expired: the store's clock is read
// after the test's, by up to a round trip.
const slotSlop = 50 * time.Millisecond

func lease(t *testing.T, s fleet.SlotStore, id string, limit int, d time.Duration, want bool) {
	t.Helper()
	got, err := s.Lease(t.Context(), id, limit, d)
	if err != nil {
		t.Fatalf("Lease(%s, %d, %v): %v", id, limit, d, err)
	}
	if got != want {
		t.Fatalf("Lease(%s, %d, %v) = %v, want %v", id, limit, d, got, want)
	}
}

// leaseWithin asks for a lease every 10ms until the store gives it, for at
// most within, and returns how long that took.
func leaseWithin(t *testing.T, s fleet.SlotStore, id string, limit int, d, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, err := s.Lease(t.Context(), id, limit, d)
		if err != nil {
			t.Fatalf("Lease(%s): %v", id, err)
		}
		if got {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("Lease(%s) refused for %v", id, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SlotDrill is a run of several real processes that share one concurrency
// limit, one of which is killed while it holds slots: first a victim, a
// copy of the test binary that takes Victim slots and holds them until
// the parent kills it (SIGKILL) at KillAt; then Procs copies, each running
// Goroutines goroutines that take a slot, hold it for Hold and give it back,
// as fast as the limit lets them, for Duration. The parent collects when
// each attempt held its slot.
//
// The test binary's TestMain makes the workers: when [SlotWorker] reports
// that the process is one, it builds its Concurrency from the drill (Name,
// Limit, Lease) and calls Work, which exits (the victim never returns
// until killed).
type SlotDrill struct {
	Procs      int           // worker processes, the victim not counted
	Goroutines int           // in each
	Duration   time.Duration // of the workers' run
	Name       string        // of the limit on the store
	Limit      int
	Lease      time.Duration
	Hold       time.Duration // each attempt's time in flight
	Victim     int           // slots the victim holds
	KillAt     time.Duration // when the victim is killed, from the start
	Start      time.Time     // set by Run
	IsVictim   bool          // set by Run, in the victim's copy
}

// SlotResult is what a SlotDrill's processes reported.
type SlotResult struct {
	SlotDrill
	// Held holds, for each attempt of a worker, when it took its slot and
	// when it gave it back, from the start, in the order they began.
	Held [][2]time.Duration
	// VictimHeld holds when the victim took each of its slots, from the
	// start (negative: before it).
	VictimHeld []time.Duration
	// Killed is when the victim was killed, from the start.
	Killed time.Duration
	// Errors counts the Acquires that failed, by their error's text.
	Errors map[string]int
}

const slotEnv = "FLEETTEST_SLOTS"

// SlotWorker reports whether this process is a worker (or the victim) of a
// SlotDrill, and which.
func SlotWorker() (SlotDrill, bool) {
	v := os.Getenv(slotEnv)
	if v == "" {
		return SlotDrill{}, false
	}
	var d SlotDrill
	if err := json.Unmarshal([]byte(v), &d); err != nil {
		fmt.Fprintln(os.Stderr, "fleettest: bad", slotEnv, err)
		os.Exit(2)
	}
	return d, true
}

// Work runs the process's part of the drill on c, reports to the parent on
// stdout, and exits; the victim takes its slots, reports each, and waits to
// be killed.
func (d SlotDrill) Work(c retry.Concurrency) {
	out := bufio.NewWriter(os.Stdout)
	if d.IsVictim {
		for range d.Victim {
			// A first round trip on a loaded machine (a new connection, a
			// table to create) may fail: asked again for up to a minute.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				_, err := c.Acquire(context.Background(), deadline)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					fmt.Fprintln(os.Stderr, "fleettest: the victim found no slot:", err)
					os.Exit(2)
				}
			}
			fmt.Fprintln(out, "h", time.Now().UnixNano())
			out.Flush()
		}
		select {} // killed here, holding its slots
	}
	time.Sleep(time.Until(d.Start))
	ctx, cancel := context.WithDeadline(context.Background(), d.Start.Add(d.Duration))
	defer cancel()
	var mu sync.Mutex
	errs := map[string]int{}
	var wg sync.WaitGroup
	for range d.Goroutines {
		wg.Go(func() {
			var held [][2]int64
			defer func() {
				mu.Lock()
				for _, h := range held {
					fmt.Fprintln(out, "i", h[0], h[1])
				}
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				release, err := c.Acquire(ctx, time.Time{})
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs[err.Error()]++
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
					continue
				}
				// Stamped inside the slot: after Acquire returned, before
				// release is called, so that the attempts' times in flight
				// lie within their leases.
				from := time.Now().UnixNano()
				time.Sleep(d.Hold)
				held = append(held, [2]int64{from, time.Now().UnixNano()})
				release(d.Hold, nil)
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // the last releases' round trips
	for e, n := range errs {
		fmt.Fprintf(out, "e %d %s\n", n, strconv.Quote(e))
	}
	out.Flush()
	os.Exit(0)
}

// Run starts the victim and waits until it holds its slots, then starts the
// workers, with extra environment env (NAME=value), 1.5s ahead of the
// start so that all are ready, kills the victim at KillAt, waits for the
// workers, and returns what they reported.
func (d SlotDrill) Run(t testing.TB, env ...string) SlotResult {
	t.Helper()
	start := func(d SlotDrill) (*exec.Cmd, *bufio.Scanner) {
		spec, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), slotEnv+"="+string(spec)), env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out)
	}
	res := SlotResult{SlotDrill: d, Errors: map[string]int{}}

	v := d
	v.IsVictim = true
	victim, lines := start(v)
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = victim.Process.Signal(syscall.SIGKILL)
			_ = victim.Wait()
		}
	}
	t.Cleanup(kill)
	var held []int64
	for len(held) < d.Victim && lines.Scan() {
		kind, rest, _ := strings.Cut(lines.Text(), " ")
		if ns, err := strconv.ParseInt(rest, 10, 64); err == nil && kind == "h" {
			held = append(held, ns)
		}
	}
	if len(held) < d.Victim {
		t.Fatalf("the victim reported %d slots held of %d", len(held), d.Victim)
	}

	d.Start = time.Now().Add(1500 * time.Millisecond)
	res.Start = d.Start
	for _, ns := range held {
		res.VictimHeld = append(res.VictimHeld, time.Unix(0, ns).Sub(d.Start))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range d.Procs {
		cmd, lines := start(d)
		wg.Go(func() {
			var spans [][2]time.Duration
			errs := map[string]int{}
			for lines.Scan() {
				kind, rest, _ := strings.Cut(lines.Text(), " ")
				switch kind {
				case "i":
					a, b, _ := strings.Cut(rest, " ")
					from, err1 := strconv.ParseInt(a, 10, 64)
					to, err2 := strconv.ParseInt(b, 10, 64)
					if err1 == nil && err2 == nil {
						spans = append(spans, [2]time.Duration{time.Unix(0, from).Sub(d.Start), time.Unix(0, to).Sub(d.Start)})
					}
				case "e":
					count, text, _ := strings.Cut(rest, " ")
					n, _ := strconv.Atoi(count)
					if s, err := strconv.Unquote(text); err == nil {
						errs[s] += n
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
			mu.Lock()
			res.Held = append(res.Held, spans...)
			for e, n := range errs {
				res.Errors[e] += n
			}
			mu.Unlock()
		})
	}
	time.Sleep(time.Until(d.Start.Add(d.KillAt)))
	kill()
	res.Killed = time.Since(d.Start)
	wg.Wait()
	slices.SortFunc(res.Held, func(a, b [2]time.Duration) int { return int(a[0] - b[0]) })
	return res
}

// MostInFlight returns the most workers' attempts that held a slot at once
// at any time in [from, to).
func (r SlotResult) MostInFlight(from, to time.Duration) int {
	most := 0
	for _, s := range r.states() {
		if s.from < to && s.to > from {
			most = max(most, s.n)
		}
	}
	return most
}

// FirstReach returns the first time, from the start and no earlier than
// from, at which n workers' attempts held a slot at once, or -1 if none
// did.
func (r SlotResult) FirstReach(n int, from time.Duration) time.Duration {
	for _, s := range r.states() {
		if s.n >= n && s.to > from {
			return max(s.from, from)
		}
	}
	return -1
}

// inFlight is how many attempts held a slot over [from, to).
type inFlight struct {
	from, to time.Duration
	n        int
}

// states returns how many attempts held a slot, over the whole run, in time
// order. An attempt that ends when another begins is not counted with it.
func (r SlotResult) states() []inFlight {
	type change struct {
		at time.Duration
		d  int
	}
	changes := make([]change, 0, 2*len(r.Held))
	for _, h := range r.Held {
		changes = append(changes, change{h[0], 1}, change{h[1], -1})
	}
	slices.SortFunc(changes, func(a, b change) int { return int(a.at - b.at) })
	var states []inFlight
	n := 0
	for i, c := range changes {
		n += c.d
		if i+1 < len(changes) && changes[i+1].at == c.at {
			continue // the same time: ends and begins together
		}
		to := time.Duration(math.MaxInt64)
		if i+1 < len(changes) {
			to = changes[i+1].at
		}
		states = append(states, inFlight{c.at, to, n})
	}
	return states
}

// String sums the run up: attempts, the most in flight before the kill and
// after, and when the workers first held every slot after it.
func (r SlotResult) String() string {
	return fmt.Sprintf("%d procs x %d goroutines, limit %d, lease %v, victim holding %d killed at %v: %d attempts, at most %d in flight before the kill and %d after; all %d slots held again %v after the kill; errors %v",
		r.Procs, r.Goroutines, r.Limit, r.Lease, r.Victim, r.Killed, len(r.Held),
		r.MostInFlight(0, r.Killed), r.MostInFlight(r.Killed, r.Duration), r.Limit,
		r.FirstReach(r.Limit, r.Killed)-r.Killed, r.Errors)
}

// Check makes the drill's checks, with t.Errorf: the workers never held
// more than the limit at once, nor more than the victim left them (Limit
// less Victim) from the start until a third of a lease after the kill (the
// victim's leases, renewed every third of a lease, have at least another
// third to run then); they held all it left them before the kill, and
// every slot again within regain after the kill; and no Acquire failed. A
// regain of a lease and a second is generous on any machine: the victim's
// leases run out at most a lease after the kill, and the waiting workers
// ask every 50ms at most.
func (r SlotResult) Check(t testing.TB, regain time.Duration) {
	t.Helper()
	if n := r.MostInFlight(0, r.Duration); n > r.Limit {
		t.Errorf("%d attempts in flight at once, above the limit of %d", n, r.Limit)
	}
	left := r.Limit - r.Victim
	if n := r.MostInFlight(0, r.Killed+r.Lease/3); n > left {
		t.Errorf("%d workers' attempts in flight at once while the victim held %d slots (or its leases still ran), above the %d it left", n, r.Victim, left)
	}
	if n := r.MostInFlight(0, r.Killed); n < left {
		t.Errorf("at most %d workers' attempts in flight before the kill: the %d slots left were not all used", n, left)
	}
	switch at := r.FirstReach(r.Limit, r.Killed); {
	case at < 0:
		t.Errorf("the workers never held all %d slots after the victim was killed", r.Limit)
	case at-r.Killed > regain:
		t.Errorf("the workers held all %d slots again %v after the kill, later than %v", r.Limit, at-r.Killed, regain)
	}
	if len(r.Errors) > 0 {
		t.Errorf("Acquires failed: %v", r.Errors)
	}
}
