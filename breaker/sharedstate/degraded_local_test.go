package sharedstate_test

// The KeepLocal rules while the store refuses writes: the evidence it refused counts in
// this replica, which opens, probes and recovers for itself; the paths where the shared
// record needs a write the store refuses (the fleet tripped the count, a ForceClose
// ended, another replica's record is half-open, a shared probe's failure cannot be
// written); and the guards of a local opening or probe that races a write.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// Failures the store refuses count here: at the threshold the replica opens locally
// for the break, then admits one local probe at a time; a failed probe opens it again
// for a doubled break, a successful one closes it, and once RetryDelay has passed
// without a refusal the replica trusts the store again.
func TestKeepLocalOpensProbesAndRecoversHere(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := keepLocalCircuit(t, d, clock, seen, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	gen := c.Snapshot().Generation
	d.RefuseWrites(errOOM)
	refusedAt := clock.Now()
	for i := 1; i <= 2; i++ {
		if !outcome(t, c, breaker.Failure) {
			t.Fatalf("failure %d the store refused did not count here", i)
		}
		if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != i || !s.DegradedSince.Equal(refusedAt) {
			t.Fatalf("after %d refused failures: %+v; want closed, %d failures, degraded since %v", i, s, i, refusedAt)
		}
		clock.Advance(100 * time.Millisecond)
	}
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("the third refused failure did not count")
	}
	wantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if seen.last().Generation != gen {
		t.Fatalf("local opening reported with generation %d; want the shared one, %d", seen.last().Generation, gen)
	}
	until := clock.Now().Add(time.Minute)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) || s.Failures != 3 {
		t.Fatalf("after the threshold: %+v; want open until %v with 3 failures", s, until)
	}
	if r, _ := d.Load(ctx, "kafka:orders"); r.State != breaker.Closed || r.Failures != 0 {
		t.Fatalf("stored %+v; want the record untouched (the store refuses)", r)
	}
	loads := d.count("load")
	if got := openedUntil(t, c, "open here"); !got.Equal(until) {
		t.Fatalf("rejected until %v; want %v", got, until)
	}
	if d.count("load") != loads {
		t.Fatal("a call rejected by the local break read the store")
	}

	clock.Set(until.Add(-time.Nanosecond))
	openedUntil(t, c, "a nanosecond before the local break ends")
	clock.Set(until)
	probe, err := c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire when the local break ended: probe %v, %v; want a local probe", probe.Probe(), err)
	}
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("with a local probe out: %+v; want half-open with 1 probe", s)
	}
	if got, want := openedUntil(t, c, "a second caller during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("second caller rejected until %v; want HalfOpenRetryDelay later, %v", got, want)
	}
	if !probe.Complete(breaker.Failure) {
		t.Fatal("a failed local probe did not count")
	}
	wantTransition(t, seen, 2, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
	until = clock.Now().Add(2 * time.Minute) // one failed probe doubles the break
	if got := openedUntil(t, c, "after a failed local probe"); !got.Equal(until) {
		t.Fatalf("after a failed local probe rejected until %v; want %v", got, until)
	}
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) {
		t.Fatalf("after a failed local probe: %+v; want open until %v", s, until)
	}

	clock.Set(until)
	probe, err = c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire after the second local break: probe %v, %v; want a local probe", probe.Probe(), err)
	}
	if probe.Complete(breaker.Neutral) {
		t.Fatal("a neutral local probe counted")
	}
	if len(seen.seen) != 2 {
		t.Fatalf("a neutral local probe made a transition: %+v", seen.last())
	}
	probe, err = c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire after a neutral local probe: probe %v, %v; want the next local probe", probe.Probe(), err)
	}
	if !probe.Complete(breaker.Success) {
		t.Fatal("a successful local probe did not count")
	}
	wantTransition(t, seen, 3, breaker.HalfOpen, breaker.Closed, sharedstate.ReasonLocalRecovered)
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 || s.DegradedSince.IsZero() {
		t.Fatalf("after the local recovery: %+v; want closed, no failures, still degraded", s)
	}
	p, err := c.Acquire(ctx) // RetryDelay has passed: the spent evidence is dropped
	if err != nil || p.Probe() {
		t.Fatalf("Acquire after the local recovery: probe %v, %v; want an ordinary call", p.Probe(), err)
	}
	p.Complete(breaker.Neutral)
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("after RetryDelay with the evidence spent: %+v; want no longer degraded", s)
	}

	// After a local recovery a new refused failure starts counting from zero.
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("a refused failure after the recovery did not count")
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 1 {
		t.Fatalf("one refused failure after the recovery: %+v; want closed with 1", s)
	}
}

// A success the replica counts while degraded wipes the local failures, as a success
// does on the shared record; a neutral outcome leaves them.
func TestKeepLocalSuccessResetsTheLocalCount(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := keepLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Hour; cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Neutral)
	if s := c.Snapshot(); s.Failures != 2 {
		t.Fatalf("after 2 refused failures and a neutral outcome: %d failures; want 2", s.Failures)
	}
	if !outcome(t, c, breaker.Success) {
		t.Fatal("a success while degraded did not count")
	}
	if s := c.Snapshot(); s.Failures != 0 || s.DegradedSince.IsZero() {
		t.Fatalf("after a success: %+v; want no failures, still degraded", s)
	}
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	if s := c.Snapshot(); s.State != breaker.Closed || len(seen.seen) != 0 {
		t.Fatalf("2 failures after a success opened the replica: %+v", s)
	}
	outcome(t, c, breaker.Failure)
	wantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
}

// A write is tried again exactly when RetryDelay after the refusal ends, not a
// nanosecond before.
func TestKeepLocalRetriesTheStoreExactlyAfterRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.Policy.FailureThreshold = 10
	})
	permits := make([]breaker.Permit, 3)
	for i := range permits {
		permits[i] = mustAcquire(t, c)
	}
	d.RefuseWrites(errOOM)
	refusedAt := clock.Now()
	permits[0].Complete(breaker.Failure)
	adds := d.count("add")
	clock.Set(refusedAt.Add(time.Second - time.Nanosecond))
	permits[1].Complete(breaker.Failure)
	if d.count("add") != adds {
		t.Fatal("a write tried a nanosecond before RetryDelay ended")
	}
	clock.Set(refusedAt.Add(time.Second))
	permits[2].Complete(breaker.Failure)
	if d.count("add") != adds+1 {
		t.Fatalf("%d writes when RetryDelay ended; want 1", d.count("add")-adds)
	}
	if s := c.Snapshot(); s.Failures != 3 {
		t.Fatalf("%d failures kept here; want all 3", s.Failures)
	}
}

// Each failed local probe doubles the local break: one minute, then two, then four.
func TestKeepLocalFailedProbesBackOff(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, nil)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	for i, brk := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		until := openedUntil(t, c, "locally open")
		if want := clock.Now().Add(brk); !until.Equal(want) {
			t.Fatalf("local break %d ends %v; want %v (%v)", i+1, until, want, brk)
		}
		clock.Set(until)
		p := mustAcquire(t, c)
		if !p.Probe() {
			t.Fatalf("no local probe after local break %d", i+1)
		}
		p.Complete(breaker.Failure)
	}
}

// Under KeepLocal a refused write is still reported to OnError, as ErrUnavailable
// caused by the refusal, though the call's outcome is kept here.
func TestKeepLocalReportsTheRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	var reported []error
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	refusedFailure(t, c, d)
	if len(reported) != 1 || !errors.Is(reported[0], breaker.ErrUnavailable) || !errors.Is(reported[0], errOOM) {
		t.Fatalf("OnError got %v; want the refusal, as ErrUnavailable", reported)
	}
}

// refusingStoreCircuit returns a KeepLocal circuit (RetryDelay a minute, then edit;
// transitions to seen) and its counting store, which has just refused one failure
// that the circuit keeps here.
func refusingStoreCircuit(t *testing.T, seen *transitions, edit func(*sharedstate.Config)) (*fakeclock.Clock, *counting, *sharedstate.Circuit) {
	t.Helper()
	clock, d := fakeclock.New(rulesT0), newCounting()
	c := keepLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
		cfg.RetryDelay = time.Minute
		if edit != nil {
			edit(cfg)
		}
	})
	refusedFailure(t, c, d)
	return clock, d, c
}

// When the fleet's count reached the threshold and this replica, holding refused
// evidence of its own, cannot write the OPEN, it opens for itself.
func TestKeepLocalOpensWhenTheFleetTripsAndOpenIsRefused(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := keepLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	refusedFailure(t, c, d)
	tripped := editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 })
	clock.Advance(2 * time.Second) // the snapshot is stale; RetryDelay still runs
	until := clock.Now().Add(time.Minute)
	if got := openedUntil(t, c, "the fleet tripped, OPEN refused"); !got.Equal(until) {
		t.Fatalf("rejected until %v; want the break from now, %v", got, until)
	}
	wantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if g := seen.last().Generation; g != tripped.Generation {
		t.Fatalf("local opening reported with generation %d; want %d", g, tripped.Generation)
	}
	loads := d.count("load")
	if got := openedUntil(t, c, "open here"); !got.Equal(until) {
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
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 0 })
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
	c := keepLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
		cfg.RetryDelay = time.Minute
		cfg.Policy.MaxBreakDuration = time.Hour
	})
	refusedAt := clock.Now()
	refusedFailure(t, c, d)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.FailedProbes, r.Failures = breaker.HalfOpen, r.Generation+1, 2, 3
	})
	clock.Advance(2 * time.Second)
	p1, p2 := mustAcquire(t, c), mustAcquire(t, c)
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
	probe := mustAcquire(t, c)
	if !probe.Probe() {
		t.Fatal("the call when RetryDelay ended is no probe")
	}
	if d.count("replace") == writes {
		t.Fatal("the store was not tried again when RetryDelay ended")
	}
	if got, want := openedUntil(t, c, "during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("during the local probe rejected until %v; want %v", got, want)
	}
	if !probe.Complete(breaker.Failure) {
		t.Fatal("the failed local probe did not count")
	}
	wantTransition(t, seen, 2, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
	// The record had 2 failed probes: the third breaks for 8 minutes.
	if got, want := openedUntil(t, c, "after the local probe failed"), clock.Now().Add(8*time.Minute); !got.Equal(want) {
		t.Fatalf("after the local probe failed rejected until %v; want %v", got, want)
	}
}

// A permit admitted on local evidence that completes after the replica trusted the
// store again changes nothing.
func TestLocalPermitAfterTheDegradedStateEndedIsDropped(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	refusedAt := clock.Now()
	refusedFailure(t, c, d)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.State, r.Generation = breaker.HalfOpen, r.Generation+1 })
	clock.Advance(2 * time.Second)
	p1, p2 := mustAcquire(t, c), mustAcquire(t, c)
	p1.Complete(breaker.Success) // the local evidence is spent
	d.RefuseWrites(nil)
	clock.Set(refusedAt.Add(time.Minute))
	probe := mustAcquire(t, c)
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
		c := keepLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) {
			cfg.OnStoreFailure = mode
			cfg.Policy.MaxBreakDuration = time.Hour
		})
		openThenProbe(t, c, clock).Complete(breaker.Failure) // written: 1 failed probe, a 2-minute break
		clock.Advance(2 * time.Minute)
		p := mustAcquire(t, c)
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
		wantTransition(t, seen, n+1, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
		if seen.last().Generation != gen {
			t.Fatalf("reported with generation %d; want the probe's, %d", seen.last().Generation, gen)
		}
		if got, want := openedUntil(t, c, "after the refused probe failure"), clock.Now().Add(4*time.Minute); !got.Equal(want) {
			t.Fatalf("rejected until %v; want the break of 2 failed probes, %v", got, want)
		}
	}
}

// When a ForceClose ends and the store refuses the write that ends it, the replica
// admits on local evidence, and counts the outcomes here.
func TestKeepLocalAdmitsWhenTheEndOfAForceCloseIsRefused(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, nil)
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	clock.Advance(time.Minute)
	p := mustAcquire(t, c)
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
	h := &flakyCounter{flakyDriver: newFlakyDriver()}
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := mustAcquire(t, c)
	h.addConflict = true
	editRecord(t, h.m, func(r *sharedstate.Record) { r.Generation = 0 })
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

// wantSaturated fails t unless c's next Acquire is ErrSaturated; a permit handed
// out instead is completed.
func wantSaturated(t *testing.T, c *sharedstate.Circuit, what string) {
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
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	held := mustAcquire(t, c) // the only slot, taken before the store refuses writes
	defer held.Complete(breaker.Neutral)
	d.RefuseWrites(errOOM)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // the fleet tripped
	clock.Advance(2 * time.Second)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("the fleet tripped and OPEN refused: Acquire = %v; want ErrOpen (open here)", err)
	}
	clock.Advance(time.Minute) // the local break is over; so is RetryDelay
	wantSaturated(t, c, "the local probe with no slot left")
}

// While another replica's probe holds the half-open record and this replica, holding
// refused evidence, admits calls on it, a call with no slot left is ErrSaturated.
func TestLocalEvidenceOverMaxInFlightIsSaturated(t *testing.T) {
	clock, d, c := refusingStoreCircuit(t, &transitions{}, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	lease := sharedstate.Lease{ID: 7, Owner: "another replica", Expires: clock.Now().Add(time.Hour).UnixNano()}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.Leases = breaker.HalfOpen, r.Generation+1, []sharedstate.Lease{lease}
	})
	clock.Advance(2 * time.Second)
	local := mustAcquire(t, c)
	defer local.Complete(breaker.Neutral)
	if local.Probe() {
		t.Fatal("the call admitted on local evidence is a probe")
	}
	wantSaturated(t, c, "a call on local evidence with no slot left")
}

// A local opening on the outcomes of calls admitted on local evidence is reported
// with the generation of the shared record those calls were admitted under.
func TestLocalOpeningOnLocalEvidenceCarriesTheRecordsGeneration(t *testing.T) {
	seen := &transitions{}
	clock, d, c := refusingStoreCircuit(t, seen, nil)
	waiting := editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // half-open, waiting for a write
		r.State, r.Generation, r.Reason, r.Since = breaker.HalfOpen, r.Generation+1, breaker.ReasonBreakElapsed, clock.Now().UnixNano()
	})
	clock.Advance(2 * time.Second)
	p1, p2 := mustAcquire(t, c), mustAcquire(t, c) // admitted on local evidence
	p1.Complete(breaker.Failure)
	p2.Complete(breaker.Failure) // the third failure: open here (after the half-open learned)
	wantTransition(t, seen, 2, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if g := seen.last().Generation; g != waiting.Generation {
		t.Fatalf("local opening reported with generation %d; want the record's %d", g, waiting.Generation)
	}
}

// probeLocally's and openRefused's own guards: a local opening or probe that happens
// while this replica's lease or OPEN write is out (another caller's call completes or
// starts meanwhile) must still hold when the store refuses the write. A driver hook
// runs that other call inside the write, so the interleaving is deterministic.

// duringWriteDriver runs during once inside the next Replace, then fails that write
// unapplied with fail (errOOM, a refusal, when nil).
type duringWriteDriver struct {
	*counting
	during func()
	fail   error
}

func (w *duringWriteDriver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	if f := w.during; f != nil {
		w.during = nil
		f()
		if w.fail != nil {
			return w.fail
		}
		return errOOM
	}
	return w.counting.Replace(ctx, id, expect, next)
}

// refusedWrites is the state both tests below start from: c (KeepLocal, RetryDelay a
// minute) over w, whose store has refused writes since start; two failures kept here;
// the shared record opened by another replica until start+10s and over by the clock's
// time (start+20s); and local, a call admitted on local evidence.
type refusedWrites struct {
	clock *fakeclock.Clock
	w     *duringWriteDriver
	c     *sharedstate.Circuit
	start time.Time
	local breaker.Permit
}

func localPermitOverRefusedWrites(t *testing.T, seen *transitions) refusedWrites {
	t.Helper()
	s := refusedWrites{clock: fakeclock.New(rulesT0), w: &duringWriteDriver{counting: newCounting()}}
	s.c = keepLocalCircuit(t, s.w, s.clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	if err := s.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.start = s.clock.Now()
	s.w.RefuseWrites(errOOM)
	outcome(t, s.c, breaker.Failure)
	outcome(t, s.c, breaker.Failure) // 2 of 3 kept here
	editRecord(t, s.w.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, s.start.Add(10*time.Second).UnixNano()
	})
	s.clock.Advance(20 * time.Second) // the shared break is over; RetryDelay is not
	s.local = mustAcquire(t, s.c)     // admitted on local evidence
	if s.local.Probe() {
		t.Fatal("the call admitted on local evidence is a probe")
	}
	return s
}

// wantRejectedUntil fails t unless err, the answer of an Acquire that returned p, is an
// *OpenError whose NotBefore is until; a permit handed out instead is completed.
func wantRejectedUntil(t *testing.T, p breaker.Permit, err error, until time.Time, what string) {
	t.Helper()
	var oe *breaker.OpenError
	if errors.As(err, &oe) && oe.NotBefore.Equal(until) {
		return
	}
	if err == nil {
		p.Complete(breaker.Neutral)
	}
	t.Fatalf("%s: Acquire = %v; want a rejection until %v", what, err, until)
}

func TestLocalOpeningDuringARefusedLeaseWriteHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration // the clock moves on by this inside the write
		probe   bool          // the call gets a local probe (else a rejection)
		inside  bool          // another call takes the local probe inside the write
	}{
		{"the local break running", 0, false, false},
		{"the local break ending as the write returns", time.Minute, true, false},
		{"the local probe taken while the write is out", time.Minute, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := localPermitOverRefusedWrites(t, &transitions{})
			s.clock.Set(s.start.Add(time.Minute)) // RetryDelay ends: the next call tries the lease
			var until time.Time
			var inner breaker.Permit
			s.w.during = func() {
				s.local.Complete(breaker.Failure) // the third failure: open here
				until = s.clock.Now().Add(time.Minute)
				s.clock.Advance(tc.advance)
				if tc.inside {
					inner = mustAcquire(t, s.c)
					if !inner.Probe() {
						t.Error("the call as the local break ended is no probe")
					}
					until = s.clock.Now().Add(5 * time.Second) // HalfOpenRetryDelay
				}
			}
			p, err := s.c.Acquire(context.Background())
			if tc.inside {
				defer inner.Complete(breaker.Neutral)
			}
			if tc.probe {
				if err != nil || !p.Probe() {
					t.Fatalf("Acquire as the local break ends: probe %v, %v; want a local probe", p.Probe(), err)
				}
				p.Complete(breaker.Neutral)
				return
			}
			wantRejectedUntil(t, p, err, until, "Acquire whose lease write saw a local opening")
		})
	}
}

// The same for the OPEN this replica writes over a tripped record: a local opening
// made while that write is out is the one that stands (one transition, its deadline).
func TestLocalOpeningDuringARefusedOpenWriteIsNotRepeated(t *testing.T) {
	seen := &transitions{}
	s := localPermitOverRefusedWrites(t, seen)
	editRecord(t, s.w.MemoryDriver, func(r *sharedstate.Record) { // closed again, and tripped by the fleet
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Closed, r.Generation+1, 0, 3
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, s.clock.Now().UnixNano()
	})
	s.clock.Set(s.start.Add(time.Minute)) // RetryDelay ends: the next call writes OPEN
	var until time.Time
	s.w.during = func() {
		s.local.Complete(breaker.Failure) // the third failure: open here
		until = s.clock.Now().Add(time.Minute)
		s.clock.Advance(time.Second)
	}
	p, err := s.c.Acquire(context.Background())
	wantRejectedUntil(t, p, err, until, "Acquire whose OPEN write saw a local opening")
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

// And when, while that OPEN is out, the record's break ends and another call takes a
// local probe (its lease refused too), the call whose OPEN the store refused is turned
// away for HalfOpenRetryDelay, as during any local probe.
func TestLocalProbeDuringARefusedOpenWriteTurnsTheCallAway(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	w := &duringWriteDriver{counting: newCounting()}
	c := keepLocalCircuit(t, w, clock, &transitions{}, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	editRecord(t, w.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // the fleet tripped
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	w.RefuseWrites(errOOM)
	var probe breaker.Permit
	w.during = func() {
		editRecord(t, w.MemoryDriver, func(r *sharedstate.Record) { // another replica opened it; its break is over
			r.State, r.Generation, r.Failures = breaker.Open, r.Generation+1, 0
			r.OpenUntil, r.Reason, r.Since = clock.Now().Add(-time.Second).UnixNano(), breaker.ReasonFailureThreshold, clock.Now().Add(-time.Minute).UnixNano()
		})
		if err := c.Refresh(ctx); err != nil {
			t.Error(err)
		}
		probe = mustAcquire(t, c) // its lease refused: a local probe
		if !probe.Probe() {
			t.Error("the call after the break is no probe")
		}
	}
	p, err := c.Acquire(ctx)
	if probe != (breaker.Permit{}) {
		defer probe.Complete(breaker.Neutral)
	}
	wantRejectedUntil(t, p, err, clock.Now().Add(5*time.Second), "Acquire whose OPEN was refused during a local probe")
}

// Two callers whose first refusals race (the second one's runs while the first is
// between finding no degraded state and creating one, through a test hook) share one
// degraded state: both failures count here.
func TestFirstRefusalsAtOnceShareTheDegradedState(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, nil)
	first, second := mustAcquire(t, c), mustAcquire(t, c)
	d.RefuseWrites(errOOM)
	var secondKept bool
	unset := sharedstate.SetTestHookRefused(nil)
	defer unset()
	sharedstate.SetTestHookRefused(func() {
		sharedstate.SetTestHookRefused(nil)
		secondKept = second.Complete(breaker.Failure)
	})
	if firstKept := first.Complete(breaker.Failure); !firstKept || !secondKept {
		t.Fatalf("failures refused at once: kept %v and %v; want both kept here", firstKept, secondKept)
	}
	if s := c.Snapshot(); s.Failures != 2 || s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want 2 failures kept here, degraded", s)
	}
}
