package sharedstate_test

// Probe outcomes at their edges: the break doubling per failed probe and its reset
// by a success, a lease that ends exactly as the probe completes, and the cost of a
// probe's outcome in requests (issue 33).

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A failed probe doubles the break and is counted in FailedProbes; the probe that
// closes the circuit clears them, so that the next outage starts from the policy's
// break again.
func TestFailedProbesDoubleTheBreakUntilAProbeSucceeds(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.MaxBreakDuration = time.Hour })
	esProbe(t, c, clock).Complete(breaker.Failure)
	until := clock.Now().Add(2 * time.Minute)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) || s.FailedProbes != 1 {
		t.Fatalf("after a failed probe: %+v; want open until %v with 1 failed probe", s, until)
	}
	clock.Set(until)
	p := esAcquire(t, c)
	if !p.Probe() || !p.Complete(breaker.Success) {
		t.Fatal("the second probe was not admitted or its success not counted")
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.FailedProbes != 0 {
		t.Fatalf("after a successful probe: %+v; want closed with no failed probes", s)
	}
	if r, _ := d.Load(context.Background(), "kafka:orders"); r.FailedProbes != 0 {
		t.Fatalf("stored %d failed probes after the close; want 0", r.FailedProbes)
	}
	esProbe(t, c, clock).Complete(breaker.Failure) // a new outage: the first failed probe again
	if s := c.Snapshot(); !s.NotBefore.Equal(clock.Now().Add(2 * time.Minute)) {
		t.Fatalf("the first failed probe of a new outage breaks until %v; want 2 minutes", s.NotBefore)
	}
}

// A probe that completes exactly when its lease ends no longer counts: another
// replica may have taken the slot over.
func TestProbeAtItsLeaseEndDoesNotCount(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.ProbeLease = 10 * time.Second })
	p := esProbe(t, c, clock)
	clock.Advance(10*time.Second - time.Nanosecond)
	if _, err := c.Acquire(context.Background()); err == nil {
		t.Fatal("a second probe admitted while the first lease holds")
	}
	clock.Advance(time.Nanosecond)
	if p.Complete(breaker.Success) {
		t.Fatal("a probe completed at its lease's end counted")
	}
	if r, _ := d.Load(context.Background(), "kafka:orders"); r.State != breaker.HalfOpen {
		t.Fatalf("stored %+v; want still half-open", r)
	}
}

// A probe's outcome on a fresh snapshot of its generation costs one write and no read.
func TestProbeOutcomeOnAFreshSnapshotReadsNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	p := esProbe(t, c, clock)
	loads, writes := d.count("load"), d.count("replace")
	if !p.Complete(breaker.Success) {
		t.Fatal("the probe's success did not count")
	}
	if l, w := d.count("load")-loads, d.count("replace")-writes; l != 0 || w != 1 {
		t.Fatalf("the probe's outcome cost %d reads and %d writes; want 0 and 1", l, w)
	}
}

// A probe that fails after another succeeded opens a clean record: no success count
// and no lease of the half-open state carried into the break (Record.Check refuses
// leases on an open record).
func TestFailedProbeOpensACleanRecord(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.HalfOpenMaxProbes, cfg.Policy.SuccessesToClose = 2, 2
	})
	first := esProbe(t, c, clock)
	second := esAcquire(t, c)
	if !second.Probe() {
		t.Fatal("the second call after the break is no probe")
	}
	first.Complete(breaker.Success) // one of two successes
	second.Complete(breaker.Failure)
	r, err := d.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != breaker.Open || r.Successes != 0 || len(r.Leases) != 0 || r.Check("kafka:orders") != nil {
		t.Fatalf("record after the failed probe: %+v (check: %v); want open, no successes, no leases", r, r.Check("kafka:orders"))
	}
}
