package sharedstate_test

// probeLocally's own guard: a local opening that happens while this replica's lease
// write is out (another caller's failure completes meanwhile) must still hold when the
// store refuses the lease. A driver hook runs that completion inside the write, so the
// interleaving is deterministic (issue 33).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esDuringWrite runs during once inside the next Replace, then refuses that write.
type esDuringWrite struct {
	*counting
	during func()
}

func (w *esDuringWrite) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	if f := w.during; f != nil {
		w.during = nil
		f()
		return errOOM
	}
	return w.counting.Replace(ctx, id, expect, next)
}

func TestLocalOpeningDuringARefusedLeaseWriteHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration // the clock moves on by this inside the write
		probe   bool          // the call gets a local probe (else the local break's rejection)
	}{
		{"the local break running", 0, false},
		{"the local break ending as the write returns", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			w := &esDuringWrite{counting: newCounting()}
			c := esLocalCircuit(t, w, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
			ctx := context.Background()
			if err := c.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			start := clock.Now()
			w.RefuseWrites(errOOM)
			outcome(t, c, breaker.Failure)
			outcome(t, c, breaker.Failure) // 2 of 3 kept here
			esEdit(t, w.MemoryDriver, func(r *sharedstate.Record) {
				r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, start.Add(10*time.Second).UnixNano()
			})
			clock.Advance(20 * time.Second) // the shared break is over; RetryDelay is not
			local := esAcquire(t, c)        // admitted on local evidence
			if local.Probe() {
				t.Fatal("the call admitted on local evidence is a probe")
			}
			clock.Set(start.Add(time.Minute)) // RetryDelay ends: the next call tries the lease
			var until time.Time
			w.during = func() {
				local.Complete(breaker.Failure) // the third failure: open here
				until = clock.Now().Add(time.Minute)
				clock.Advance(tc.advance)
			}
			p, err := c.Acquire(ctx)
			if tc.probe {
				if err != nil || !p.Probe() {
					t.Fatalf("Acquire as the local break ends: probe %v, %v; want a local probe", p.Probe(), err)
				}
				p.Complete(breaker.Neutral)
				return
			}
			var oe *breaker.OpenError
			if !errors.As(err, &oe) || !oe.NotBefore.Equal(until) {
				if err == nil {
					p.Complete(breaker.Neutral)
				}
				t.Fatalf("Acquire whose lease write saw a local opening: %v; want the local break's rejection until %v", err, until)
			}
		})
	}
}

// The same for the OPEN this replica writes over a tripped record: a local opening
// made while that write is out is the one that stands (one transition, its deadline).
func TestLocalOpeningDuringARefusedOpenWriteIsNotRepeated(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	w := &esDuringWrite{counting: newCounting()}
	seen := &transitions{}
	c := esLocalCircuit(t, w, clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	w.RefuseWrites(errOOM)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure) // 2 of 3 kept here
	esEdit(t, w.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, start.Add(10*time.Second).UnixNano()
	})
	clock.Advance(20 * time.Second)
	local := esAcquire(t, c)                                // admitted on local evidence
	esEdit(t, w.MemoryDriver, func(r *sharedstate.Record) { // closed again, and tripped by the fleet
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Closed, r.Generation+1, 0, 3
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, clock.Now().UnixNano()
	})
	clock.Set(start.Add(time.Minute)) // RetryDelay ends: the next call writes OPEN
	var until time.Time
	w.during = func() {
		local.Complete(breaker.Failure) // the third failure: open here
		until = clock.Now().Add(time.Minute)
		clock.Advance(time.Second)
	}
	_, err := c.Acquire(ctx)
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !oe.NotBefore.Equal(until) {
		t.Fatalf("Acquire whose OPEN write saw a local opening: %v; want that opening's rejection until %v", err, until)
	}
	n := 0
	for _, tr := range seen.seen {
		if tr.Reason == sharedstate.ReasonLocalThreshold {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d local openings reported; want 1", n)
	}
}
