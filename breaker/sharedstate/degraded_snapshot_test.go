package sharedstate_test

// What Snapshot shows when a degraded replica's local evidence and the shared record
// disagree: a shared break still running says more than a shorter local one; a local
// break or probe says more than a shared break that is over (issue 33).

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esLocallyOpen returns a KeepLocal circuit that opened here (three refused failures,
// a one-minute break) at the clock's time.
func esLocallyOpen(t *testing.T, clock *fakeclock.Clock) (*sharedstate.Circuit, *counting) {
	t.Helper()
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	return c, d
}

// esSharedOpen stores the record open until the given time, as another replica that
// could write would, and makes c read it.
func esSharedOpen(t *testing.T, c *sharedstate.Circuit, d *counting, until time.Time, failures int64) {
	t.Helper()
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, until.UnixNano(), failures
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDegradedSnapshotShowsWhicheverBreakSaysMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shared   time.Duration // the shared break's end, from the local opening
		advance  time.Duration // then the clock moves on by this
		failures int64         // the shared record's count
		want     time.Duration // the NotBefore shown, from the local opening
		wantFail int
	}{
		{"a longer shared break", 5 * time.Minute, 0, 7, 5 * time.Minute, 7},
		{"a shorter shared break", 30 * time.Second, 0, 1, time.Minute, 3},
		{"a shared break that is over", 10 * time.Second, 20 * time.Second, 0, time.Minute, 3},
		{"a shared break ending now, the local one over", 2 * time.Minute, 2 * time.Minute, 0, time.Minute, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			c, d := esLocallyOpen(t, clock)
			opened := clock.Now()
			clock.Advance(tc.advance)
			esSharedOpen(t, c, d, opened.Add(tc.shared), tc.failures)
			s := c.Snapshot()
			if s.State != breaker.Open || !s.NotBefore.Equal(opened.Add(tc.want)) || s.Failures != tc.wantFail {
				t.Fatalf("snapshot %v open until %v with %d failures; want open until %v with %d",
					s.State, s.NotBefore, s.Failures, opened.Add(tc.want), tc.wantFail)
			}
		})
	}
}

// A local probe shows as half-open, unless a shared break is still running.
func TestDegradedSnapshotShowsTheLocalProbeUnlessSharedIsOpen(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c, d := esLocallyOpen(t, clock)
	clock.Advance(time.Minute)
	p := esAcquire(t, c)
	if !p.Probe() {
		t.Fatal("no local probe after the local break")
	}
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 || !s.NotBefore.IsZero() {
		t.Fatalf("with a local probe out: %v, %d probes, not before %v; want half-open, 1, none", s.State, s.Probes, s.NotBefore)
	}
	until := clock.Now().Add(time.Minute)
	esSharedOpen(t, c, d, until, 3)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) {
		t.Fatalf("a local probe under a running shared break: %v until %v; want open until %v", s.State, s.NotBefore, until)
	}
	clock.Set(until)
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("a local probe once the shared break is over: %v with %d probes; want half-open with 1", s.State, s.Probes)
	}
	p.Complete(breaker.Neutral)
}
