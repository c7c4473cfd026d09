package sharedstate_test

// Time edges of the degraded state (issue 33): the end of a shared break while writes
// are refused, the end of RetryDelay for spent evidence, and an open shared record
// under FailClosed.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// At the very end of another replica's break, with refused evidence of its own and
// RetryDelay still running, a replica admits on local evidence (the HALF-OPEN write
// waits for the store), not as a probe; a nanosecond before, the shared break rejects.
func TestAtTheEndOfASharedBreakRefusedEvidenceAdmitsLocally(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	esRefusedFailure(t, c, d)
	end := clock.Now().Add(10 * time.Second)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, end.UnixNano()
	})
	clock.Set(end.Add(-time.Nanosecond))
	if got := esOpenUntil(t, c, "a nanosecond before the shared break ends"); !got.Equal(end) {
		t.Fatalf("rejected until %v; want the shared deadline %v", got, end)
	}
	clock.Set(end)
	p := esAcquire(t, c)
	if p.Probe() {
		t.Fatal("at the end of the shared break: a probe; want a call admitted on local evidence")
	}
	p.Complete(breaker.Neutral)
}

// Evidence that is spent (a success after the refused failure) is dropped exactly
// when RetryDelay after the refusal ends.
func TestSpentEvidenceIsDroppedWhenRetryDelayEnds(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	refusedAt := clock.Now()
	esRefusedFailure(t, c, d)
	outcome(t, c, breaker.Success)
	clock.Set(refusedAt.Add(time.Second - time.Nanosecond))
	esAcquire(t, c).Complete(breaker.Neutral)
	if s := c.Snapshot(); s.DegradedSince.IsZero() {
		t.Fatal("degraded state dropped before RetryDelay ended")
	}
	clock.Set(refusedAt.Add(time.Second))
	esAcquire(t, c).Complete(breaker.Neutral)
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v when RetryDelay ended; want no longer degraded", s)
	}
}

// Under FailClosed a shared record known open still rejects as open, with its
// deadline, during the RetryDelay of a refused write: the refusal's ErrUnavailable is
// for calls the record would admit.
func TestFailClosedKnownOpenRecordRejectsAsOpen(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.OnStoreFailure = sharedstate.FailClosed
		cfg.RetryDelay = time.Minute
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := esAcquire(t, c)
	d.RefuseWrites(errOOM)
	p.Complete(breaker.Failure) // refused: calls are refused for RetryDelay
	until := clock.Now().Add(10 * time.Minute)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, until.UnixNano(), 3
	})
	c.Forget() // read the record now
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the snapshot is stale, RetryDelay runs
	_, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !oe.NotBefore.Equal(until) {
		t.Fatalf("Acquire under FailClosed with the record known open: %v; want open until %v", err, until)
	}
}

// What a degraded replica does around the read of the shared record it makes when
// its snapshot is old.

// A local opening made while the degraded path reads the record (another caller's
// failure completing meanwhile; a driver hook runs it inside the read) refuses the
// call, as if it had been made before.
func TestLocalOpeningDuringTheDegradedReadRefusesTheCall(t *testing.T) {
	clock, d, c := msRefusedCircuit(t, &transitions{}, nil)
	outcome(t, c, breaker.Failure) // 2 of 3 kept here
	third := esAcquire(t, c)
	clock.Advance(time.Second) // the snapshot is old enough to be read again
	var until time.Time
	d.mu.Lock()
	d.onLoad = func() {
		d.mu.Lock()
		d.onLoad = nil
		d.mu.Unlock()
		third.Complete(breaker.Failure) // the third failure: open here
		until = clock.Now().Add(time.Minute)
	}
	d.mu.Unlock()
	p, err := c.Acquire(context.Background())
	msRejectedUntil(t, p, err, until, "Acquire whose read saw a local opening")
}

// While this replica's local probe is out, the other calls are refused without a
// request to the store as long as the snapshot is fresh (younger than three quarters
// of MaxStaleness), and read the record first from then on.
func TestDuringTheLocalProbeAFreshSnapshotIsNotRead(t *testing.T) {
	clock, d, c := msRefusedCircuit(t, &transitions{}, nil)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure) // the third failure: open here for a minute
	clock.Advance(time.Minute)
	probe := esAcquire(t, c) // reads the record (the snapshot is old), then probes here
	defer probe.Complete(breaker.Neutral)
	if !probe.Probe() {
		t.Fatal("the call after the local break is no probe")
	}
	loads := d.count("load")
	if got, want := esOpenUntil(t, c, "during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("during the local probe rejected until %v; want %v", got, want)
	}
	if n := d.count("load") - loads; n != 0 {
		t.Fatalf("refusing a call during the local probe read the store %d times on a fresh snapshot", n)
	}
	clock.Advance(750 * time.Millisecond) // three quarters of MaxStaleness: the snapshot is old
	esOpenUntil(t, c, "during the local probe, on an old snapshot")
	if n := d.count("load") - loads; n != 1 {
		t.Fatalf("refusing a call during the local probe read the store %d times on a snapshot 750 ms old; want 1", n)
	}
}

// The degraded path decides on the record it has just read: a store that stops
// answering right after that read does not fail the call.
func TestDegradedCallDecidesOnTheRecordJustRead(t *testing.T) {
	clock, d, c := msRefusedCircuit(t, &transitions{}, nil)
	clock.Advance(2 * time.Second) // the snapshot is past MaxStaleness
	loads := 0
	d.mu.Lock()
	d.onLoad = func() {
		if loads++; loads == 2 {
			d.Down(errOOM) // the store stops answering after the first read
		}
	}
	d.mu.Unlock()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire right after a successful read of a closed record: %v; want admitted", err)
	}
	p.Complete(breaker.Neutral)
	if loads == 0 {
		t.Fatal("the degraded call did not read the old snapshot's record")
	}
}

// A snapshot ahead of the clock (the clock stepped back behind it) has no age: the
// degraded path reads the record before deciding, so a break another replica wrote
// meanwhile, not this replica's local probe, turns the call away. (Within the first
// 750 ms of the circuit, so that no sum of the two clock readings passes for an age.)
func TestDegradedReplicaReadsWhenTheClockStepsBehindItsSnapshot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { // opened by another replica; its break is over
		r.State, r.Generation, r.Reason = breaker.Open, r.Generation+1, breaker.ReasonFailureThreshold
		r.OpenUntil, r.Since = clock.Now().Add(-time.Second).UnixNano(), clock.Now().Add(-time.Minute).UnixNano()
	})
	clock.Advance(500 * time.Millisecond)
	d.RefuseWrites(errOOM)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	probe := esAcquire(t, c) // the lease refused: a local probe
	defer probe.Complete(breaker.Neutral)
	if !probe.Probe() {
		t.Fatal("the call after the break is no probe")
	}
	until := clock.Now().Add(time.Hour)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { // opened again by another replica
		r.Generation, r.OpenUntil, r.Since = r.Generation+1, until.UnixNano(), clock.Now().UnixNano()
	})
	clock.Advance(-400 * time.Millisecond) // behind the snapshot
	p, err := c.Acquire(ctx)
	msRejectedUntil(t, p, err, until, "Acquire with the clock behind the snapshot during a local probe")
}

// A degraded replica without a snapshot (dropped by Forget) whose read fails has
// nothing to decide on: the call fails with ErrUnavailable.
func TestDegradedReplicaWithoutASnapshotFailsWhenTheReadFails(t *testing.T) {
	_, d, c := msRefusedCircuit(t, &transitions{}, nil)
	c.Forget()
	d.Down(errDown)
	p, err := c.Acquire(context.Background())
	if !errors.Is(err, errDown) || !errors.Is(err, breaker.ErrUnavailable) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("Acquire with no snapshot and the store down: %v; want ErrUnavailable for %v", err, errDown)
	}
}
