package sharedstate_test

// The KeepLocal paths where the shared record needs a write the store refuses: the
// fleet tripped the count, a ForceClose ended, another replica's record is half-open,
// or a shared probe's failure cannot be written (issue 33).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esRefusedFailure makes c's store refuse writes and completes one failure, which c
// then keeps locally; the refusal is at the clock's time.
func esRefusedFailure(t *testing.T, c *sharedstate.Circuit, d *counting) {
	t.Helper()
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("the refused failure was not kept here")
	}
}

// msRefusedCircuit returns a KeepLocal circuit (RetryDelay a minute, then edit;
// transitions to seen) and its counting store, which has just refused one failure
// that the circuit keeps here.
func msRefusedCircuit(t *testing.T, seen *transitions, edit func(*sharedstate.Config)) (*fakeclock.Clock, *counting, *sharedstate.Circuit) {
	t.Helper()
	clock, d := fakeclock.New(rulesT0), newCounting()
	c := esLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
		cfg.RetryDelay = time.Minute
		if edit != nil {
			edit(cfg)
		}
	})
	esRefusedFailure(t, c, d)
	return clock, d, c
}

// When the fleet's count reached the threshold and this replica, holding refused
// evidence of its own, cannot write the OPEN, it opens for itself.
func TestKeepLocalOpensWhenTheFleetTripsAndOpenIsRefused(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := esLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	esRefusedFailure(t, c, d)
	tripped := esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 })
	clock.Advance(2 * time.Second) // the snapshot is stale; RetryDelay still runs
	until := clock.Now().Add(time.Minute)
	if got := esOpenUntil(t, c, "the fleet tripped, OPEN refused"); !got.Equal(until) {
		t.Fatalf("rejected until %v; want the break from now, %v", got, until)
	}
	esWantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if g := seen.last().Generation; g != tripped.Generation {
		t.Fatalf("local opening reported with generation %d; want %d", g, tripped.Generation)
	}
	loads := d.count("load")
	if got := esOpenUntil(t, c, "open here"); !got.Equal(until) {
		t.Fatalf("then rejected until %v; want %v", got, until)
	}
	if d.count("load") != loads {
		t.Fatal("the local break read the store")
	}
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) {
		t.Fatalf("snapshot %+v; want open until %v", s, until)
	}
	// The replica opened on the fleet's count: it goes on reporting that count as its
	// own after the record's is reset.
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 0 })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.Failures != 3 {
		t.Fatalf("after the record's count was reset: %d failures; want the 3 this replica opened on", s.Failures)
	}
}

// While another replica's record waits for a write this replica cannot make (here a
// half-open record with no lease), calls are admitted on local evidence until
// RetryDelay ends; their outcomes count here. Then the store is tried again, and a
// lease it refuses makes a local probe, one at a time, whose failure backs off from
// the record's failed probes.
func TestKeepLocalAdmitsOnLocalEvidenceWhileTheRecordWaits(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := esLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
		cfg.RetryDelay = time.Minute
		cfg.Policy.MaxBreakDuration = time.Hour
	})
	refusedAt := clock.Now()
	esRefusedFailure(t, c, d)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.FailedProbes, r.Failures = breaker.HalfOpen, r.Generation+1, 2, 3
	})
	clock.Advance(2 * time.Second)
	p1, p2 := esAcquire(t, c), esAcquire(t, c)
	if p1.Probe() || p2.Probe() {
		t.Fatal("a call admitted on local evidence is a probe")
	}
	if !p1.Complete(breaker.Failure) {
		t.Fatal("a failure admitted on local evidence did not count")
	}
	if p2.Complete(breaker.Neutral) {
		t.Fatal("a neutral outcome admitted on local evidence counted")
	}
	if s := c.Snapshot(); s.Failures != 3 || s.State != breaker.HalfOpen {
		t.Fatalf("snapshot %+v; want the record's state with 3 failures", s)
	}

	clock.Set(refusedAt.Add(time.Minute)) // RetryDelay ends: try the store again
	writes := d.count("replace")
	probe := esAcquire(t, c)
	if !probe.Probe() {
		t.Fatal("the call when RetryDelay ended is no probe")
	}
	if d.count("replace") == writes {
		t.Fatal("the store was not tried again when RetryDelay ended")
	}
	if got, want := esOpenUntil(t, c, "during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("during the local probe rejected until %v; want %v", got, want)
	}
	if !probe.Complete(breaker.Failure) {
		t.Fatal("the failed local probe did not count")
	}
	esWantTransition(t, seen, 2, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
	// The record had 2 failed probes: the third breaks for 8 minutes.
	if got, want := esOpenUntil(t, c, "after the local probe failed"), clock.Now().Add(8*time.Minute); !got.Equal(want) {
		t.Fatalf("after the local probe failed rejected until %v; want %v", got, want)
	}
}

// A permit admitted on local evidence that completes after the replica trusted the
// store again changes nothing.
func TestLocalPermitAfterTheDegradedStateEndedIsDropped(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	refusedAt := clock.Now()
	esRefusedFailure(t, c, d)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { r.State, r.Generation = breaker.HalfOpen, r.Generation+1 })
	clock.Advance(2 * time.Second)
	p1, p2 := esAcquire(t, c), esAcquire(t, c)
	p1.Complete(breaker.Success) // the local evidence is spent
	d.RefuseWrites(nil)
	clock.Set(refusedAt.Add(time.Minute))
	probe := esAcquire(t, c)
	if !probe.Probe() {
		t.Fatal("no shared probe once the store takes writes")
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want no longer degraded", s)
	}
	if p2.Complete(breaker.Failure) {
		t.Fatal("a local permit completed after the degraded state ended counted")
	}
	probe.Complete(breaker.Neutral)
}

// A shared probe whose failure the store refuses to record opens this replica for the
// break of one more failed probe than the record shows; under FailClosed it is
// dropped.
func TestSharedProbeFailureTheStoreRefusesOpensHere(t *testing.T) {
	for _, mode := range []sharedstate.StoreFailure{sharedstate.KeepLocal, sharedstate.FailClosed} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		seen := &transitions{}
		c := esLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
			cfg.OnStoreFailure = mode
			cfg.Policy.MaxBreakDuration = time.Hour
		})
		esProbe(t, c, clock).Complete(breaker.Failure) // written: 1 failed probe, a 2-minute break
		clock.Advance(2 * time.Minute)
		p := esAcquire(t, c)
		if !p.Probe() {
			t.Fatal("no probe after the second break")
		}
		gen := c.Snapshot().Generation
		n := len(seen.seen)
		d.RefuseWrites(errOOM)
		taken := p.Complete(breaker.Failure)
		if mode == sharedstate.FailClosed {
			if taken || len(seen.seen) != n {
				t.Fatalf("FailClosed: the refused probe failure counted (%v) or made a transition", taken)
			}
			continue
		}
		if !taken {
			t.Fatal("KeepLocal: the refused probe failure did not count")
		}
		esWantTransition(t, seen, n+1, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
		if seen.last().Generation != gen {
			t.Fatalf("reported with generation %d; want the probe's, %d", seen.last().Generation, gen)
		}
		if got, want := esOpenUntil(t, c, "after the refused probe failure"), clock.Now().Add(4*time.Minute); !got.Equal(want) {
			t.Fatalf("rejected until %v; want the break of 2 failed probes, %v", got, want)
		}
	}
}

// When a ForceClose ends and the store refuses the write that ends it, the replica
// admits on local evidence, and counts the outcomes here.
func TestKeepLocalAdmitsWhenTheEndOfAForceCloseIsRefused(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, nil)
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	clock.Advance(time.Minute)
	p := esAcquire(t, c)
	if p.Probe() {
		t.Fatal("admitted as a probe")
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("the failure admitted on local evidence did not count")
	}
	if s := c.Snapshot(); s.Failures != 1 || s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want 1 failure kept here, degraded", s)
	}
}

// A corrupt record read after a lost count is no refusal to keep evidence for: it is
// reported, and the replica does not report itself degraded.
func TestCorruptRecordAfterALostCountIsReportedNotKept(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := &esHookedCounter{esHooked: esNewHooked()}
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := esAcquire(t, c)
	h.addConflict = true
	esEdit(t, h.m, func(r *sharedstate.Record) { r.Generation = 0 })
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure counted over a corrupt record")
	}
	if len(reported) != 1 || !errors.Is(reported[0], sharedstate.ErrCorrupt) {
		t.Fatalf("OnError got %v; want the corrupt record", reported)
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want not degraded", s)
	}
}

// MaxInFlight holds on the paths a degraded replica decides by itself: a local probe
// and a call admitted on local evidence take a slot like any other call, and none
// left is ErrSaturated, not a decision of the shared record.

// msWantSaturated fails t unless c's next Acquire is ErrSaturated; a permit handed
// out instead is completed.
func msWantSaturated(t *testing.T, c *sharedstate.Circuit, what string) {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if errors.Is(err, breaker.ErrSaturated) {
		return
	}
	if err == nil {
		p.Complete(breaker.Neutral)
	}
	t.Fatalf("%s: Acquire = %v; want ErrSaturated", what, err)
}

// When this replica's local break ends and the only slot is taken, the call that
// would probe here is ErrSaturated.
func TestLocalProbeOverMaxInFlightIsSaturated(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	held := esAcquire(t, c) // the only slot, taken before the store refuses writes
	defer held.Complete(breaker.Neutral)
	d.RefuseWrites(errOOM)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // the fleet tripped
	clock.Advance(2 * time.Second)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("the fleet tripped and OPEN refused: Acquire = %v; want ErrOpen (open here)", err)
	}
	clock.Advance(time.Minute) // the local break is over; so is RetryDelay
	msWantSaturated(t, c, "the local probe with no slot left")
}

// While another replica's probe holds the half-open record and this replica, holding
// refused evidence, admits calls on it, a call with no slot left is ErrSaturated.
func TestLocalEvidenceOverMaxInFlightIsSaturated(t *testing.T) {
	clock, d, c := msRefusedCircuit(t, &transitions{}, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	lease := sharedstate.Lease{ID: 7, Owner: "another replica", Expires: clock.Now().Add(time.Hour).UnixNano()}
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.Leases = breaker.HalfOpen, r.Generation+1, []sharedstate.Lease{lease}
	})
	clock.Advance(2 * time.Second)
	local := esAcquire(t, c)
	defer local.Complete(breaker.Neutral)
	if local.Probe() {
		t.Fatal("the call admitted on local evidence is a probe")
	}
	msWantSaturated(t, c, "a call on local evidence with no slot left")
}

// A local opening on the outcomes of calls admitted on local evidence is reported
// with the generation of the shared record those calls were admitted under.
func TestLocalOpeningOnLocalEvidenceCarriesTheRecordsGeneration(t *testing.T) {
	seen := &transitions{}
	clock, d, c := msRefusedCircuit(t, seen, nil)
	waiting := esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { // half-open, waiting for a write
		r.State, r.Generation, r.Reason, r.Since = breaker.HalfOpen, r.Generation+1, breaker.ReasonBreakElapsed, clock.Now().UnixNano()
	})
	clock.Advance(2 * time.Second)
	p1, p2 := esAcquire(t, c), esAcquire(t, c) // admitted on local evidence
	p1.Complete(breaker.Failure)
	p2.Complete(breaker.Failure) // the third failure: open here (after the half-open learned)
	esWantTransition(t, seen, 2, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if g := seen.last().Generation; g != waiting.Generation {
		t.Fatalf("local opening reported with generation %d; want the record's %d", g, waiting.Generation)
	}
}
