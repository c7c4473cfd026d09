package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
)

func partitions(t *testing.T, clock *fakeclock.Clock, n int) *registry.Partitions {
	t.Helper()
	r := newRegistry(t, registry.WithClock(clock), registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: 3, Isolation: 10 * time.Second}))
	ps, err := r.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(n)
	use(ps, n)
	return ps
}

// use tells partitions 0..n-1 one published call each: the service writes to all of
// them, so each counts as answering.
func use(ps *registry.Partitions, n int) {
	for p := range n {
		ps.Complete(p, breaker.Success)
	}
}

func failN(ps *registry.Partitions, p, n int) {
	for range n {
		ps.Complete(p, breaker.Failure)
	}
}

// A partition whose calls keep failing is isolated (refused with an OpenError naming
// it) while the others are admitted; after the isolation one call probes it.
func TestPartitionIsolatedAndProbed(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 6)
	failN(ps, 2, 2)
	if err := ps.Admit(2); err != nil {
		t.Fatalf("isolated after 2 of 3 failures: %v", err)
	}
	ps.Complete(2, breaker.Failure)
	err := ps.Admit(2)
	var oe *breaker.OpenError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) || oe.Identity != "kafka:orders/2" || !oe.NotBefore.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("Admit(2) = %v (%+v), want an OpenError naming kafka:orders/2 until +10s", err, oe)
	}
	if pe, ok := errors.AsType[*registry.PartitionRejectedError](err); !ok || pe.Partition != 2 {
		t.Fatalf("not a PartitionRejectedError for 2: %v", err)
	}
	for p := range 6 {
		if p != 2 && ps.Admit(p) != nil {
			t.Fatalf("partition %d refused", p)
		}
	}
	if iso := ps.Isolated(); len(iso) != 1 || iso[0].Partition != 2 || iso[0].Failures != 3 || !iso[0].Since.Equal(t0) {
		t.Fatalf("Isolated() = %+v", iso)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = ps.Admit(2) }); allocs != 0 {
		t.Fatalf("a refusal allocates %v", allocs)
	}

	clock.Advance(10 * time.Second)
	if err := ps.Admit(2); err != nil {
		t.Fatalf("no probe after the isolation: %v", err)
	}
	if err := ps.Admit(2); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("a second probe admitted: %v", err)
	}
	ps.Complete(2, breaker.Failure) // the probe failed: isolated again, from now
	if err := ps.Admit(2); err == nil {
		t.Fatal("admitted after a failed probe")
	}
	clock.Advance(10 * time.Second)
	if err := ps.Admit(2); err != nil {
		t.Fatal(err)
	}
	ps.Complete(2, breaker.Neutral) // frees the probe's place
	if err := ps.Admit(2); err != nil {
		t.Fatalf("the probe's place was not freed: %v", err)
	}
	ps.Complete(2, breaker.Success)
	if ps.Isolated() != nil || ps.Admit(2) != nil {
		t.Fatalf("still isolated after a probe succeeded: %+v", ps.Isolated())
	}
	// The streak was reset: three more failures are needed.
	failN(ps, 2, 2)
	if ps.Admit(2) != nil {
		t.Fatal("the streak was not reset by the probe's success")
	}
}

// A partition's failure counts against the destination when no other partition
// answers; when every partition is isolated, isolation steps aside so that the
// destination's circuit is told Failures.
func TestPartitionsAllFailingGoToTheTopic(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 2)
	failN(ps, 0, 3)
	if ps.Admit(0) == nil {
		t.Fatal("partition 0 not isolated while partition 1 answers")
	}
	if o := ps.TopicOutcome(breaker.Failure, false, 0); o != breaker.Neutral {
		t.Fatalf("topic told %v while partition 1 answers, want Neutral", o)
	}
	if o := ps.TopicOutcome(breaker.Failure, true, 0); o != breaker.Success {
		t.Fatalf("topic told %v of a partly published call, want Success", o)
	}
	if o := ps.TopicOutcome(breaker.Failure, false, 1); o != breaker.Failure {
		t.Fatalf("topic told %v of partition 1's failure while 0 is isolated, want Failure", o)
	}
	failN(ps, 1, 3)
	if o := ps.TopicOutcome(breaker.Failure, false); o != breaker.Failure {
		t.Fatalf("topic told %v with no partition answering, want Failure", o)
	}
	if err := ps.Admit(0); err != nil {
		t.Fatalf("isolation kept while the whole topic fails: %v", err)
	}
	ps.Complete(1, breaker.Success)
	if ps.Admit(0) == nil {
		t.Fatal("isolation not back once partition 1 answers again")
	}
}

// A new leader resets the partition's evidence.
func TestPartitionLeaderChangeResets(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 3)
	ps.Leader(1, 2)
	failN(ps, 1, 3)
	ps.Leader(1, 2) // same leader: nothing changes
	if ps.Admit(1) == nil {
		t.Fatal("not isolated")
	}
	ps.Leader(1, 0)
	if err := ps.Admit(1); err != nil || ps.Isolated() != nil {
		t.Fatalf("isolation kept after the leader moved: %v", err)
	}
	failN(ps, 1, 2)
	if ps.Admit(1) != nil {
		t.Fatal("the old leader's streak was kept")
	}
}

// Unkeyed messages avoid isolated partitions; keyed ones keep theirs.
func TestPartitionRoute(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 4)
	failN(ps, 1, 3)
	failN(ps, 2, 3)
	if p, err := ps.Route(1, 4, false); p != 3 || err != nil {
		t.Fatalf("unkeyed Route(1) = %d, %v; want 3", p, err)
	}
	if p, err := ps.Route(0, 4, false); p != 0 || err != nil {
		t.Fatalf("unkeyed Route(0) = %d, %v; want 0", p, err)
	}
	if p, err := ps.Route(2, 4, true); p != 2 || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("keyed Route(2) = %d, %v; want 2 refused", p, err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		_, _ = ps.Route(0, 4, true)
		ps.Complete(0, breaker.Success)
	}); allocs != 0 {
		t.Fatalf("the healthy path allocates %v", allocs)
	}
}

// Report and IsolatedPartitions show isolated partitions only while isolated.
func TestReportListsIsolatedPartitions(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock))
	ps, err := r.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(3)
	failN(ps, 0, registry.DefaultPartitionFailures)
	if got := r.IsolatedPartitions(orders); len(got) != 1 || got[0].Partition != 0 {
		t.Fatalf("IsolatedPartitions = %+v", got)
	}
	rep := r.Report()
	if len(rep) != 1 || len(rep[0].IsolatedPartitions) != 1 {
		t.Fatalf("Report = %+v", rep)
	}
	ps.Complete(0, breaker.Success)
	if got := r.Report()[0].IsolatedPartitions; got != nil {
		t.Fatalf("healed partition still reported: %+v", got)
	}
	if _, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}}, registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: -1})); err == nil {
		t.Fatal("a negative Failures accepted")
	}
	off, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}}, registry.WithPartitionPolicy(registry.PartitionPolicy{Disabled: true}))
	if ps, err := off.Partitions(orders); ps != nil || err != nil {
		t.Fatalf("Disabled gives %v, %v", ps, err)
	}
}
