package registry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
)

// partitionsOf returns the partitions of orders in a registry of the given policies.
func partitionsOf(t *testing.T, clock *fakeclock.Clock, p breaker.Policy, pp registry.PartitionPolicy) *registry.Partitions {
	t.Helper()
	r, err := registry.New(registry.Policy{Circuit: p}, registry.WithClock(clock), registry.WithPartitionPolicy(pp))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func isolated(ps *registry.Partitions, p int) bool {
	for _, ip := range ps.Isolated() {
		if ip.Partition == p {
			return true
		}
	}
	return false
}

// The zero PartitionPolicy takes the destination's FailureThreshold and BreakDuration,
// the latter at most MaxDefaultPartitionIsolation; without a FailureThreshold (a
// disabled circuit), DefaultPartitionFailures.
func TestPartitionDefaultsComeFromTheDestinationPolicy(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitionsOf(t, clock, breaker.Policy{FailureThreshold: 5, BreakDuration: 800 * time.Millisecond}, registry.PartitionPolicy{})
	ps.SetCount(4)
	use(ps, 4)
	failN(ps, 0, 4)
	if isolated(ps, 0) {
		t.Fatal("isolated after 4 failures; the destination's threshold is 5")
	}
	ps.Complete(0, breaker.Failure)
	if !isolated(ps, 0) {
		t.Fatal("not isolated after 5 failures")
	}
	clock.Advance(800*time.Millisecond - time.Millisecond)
	if ps.Admit(0) == nil {
		t.Fatal("admitted before the destination's BreakDuration ended")
	}
	clock.Advance(time.Millisecond)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe when the BreakDuration ended: %v", err)
	}

	// A long BreakDuration: the partition still probes every second, so that its
	// broker's return is seen within about a second.
	ps = partitionsOf(t, clock, breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}, registry.PartitionPolicy{})
	use(ps, 4)
	failN(ps, 0, 5)
	clock.Advance(registry.MaxDefaultPartitionIsolation - time.Millisecond)
	if ps.Admit(0) == nil {
		t.Fatal("admitted before MaxDefaultPartitionIsolation")
	}
	clock.Advance(time.Millisecond)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe after MaxDefaultPartitionIsolation with a 30 s BreakDuration: %v", err)
	}

	// A destination whose circuit is off on purpose still isolates partitions.
	ps = partitionsOf(t, clock, breaker.DisabledPolicy(), registry.PartitionPolicy{Isolation: time.Minute})
	ps.SetCount(4)
	failN(ps, 0, registry.DefaultPartitionFailures-1)
	if isolated(ps, 0) {
		t.Fatal("isolated before DefaultPartitionFailures")
	}
	ps.Complete(0, breaker.Failure)
	if !isolated(ps, 0) {
		t.Fatal("not isolated at DefaultPartitionFailures")
	}
}

// SetCount ignores counts that are not positive; partitions outside 0..MaxPartitions-1
// are judged by the destination alone: never isolated, always admitted.
func TestPartitionCountAndRange(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitionsOf(t, clock, policy.Circuit, registry.PartitionPolicy{Failures: 1, Isolation: time.Minute, MaxPartitions: 4})
	ps.SetCount(4)
	ps.SetCount(0)
	ps.SetCount(-1)
	if ps.Count() != 4 {
		t.Fatalf("Count after SetCount(0) and SetCount(-1) = %d, want 4", ps.Count())
	}
	for _, p := range []int{-1, 4, 5} {
		failN(ps, p, 3)
		if err := ps.Admit(p); err != nil || len(ps.Isolated()) != 0 {
			t.Fatalf("partition %d out of range: Admit %v, isolated %v", p, err, ps.Isolated())
		}
		ps.Complete(p, breaker.Success)
		ps.Complete(p, breaker.Neutral)
		ps.Leader(p, 1)
	}
}

// A Success ends a streak that has not isolated yet: failures must be consecutive.
func TestPartitionSuccessEndsTheStreak(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 4)   // 3 failures isolate for 10 s
	ps.Complete(1, breaker.Success) // a partition never called: nothing to end
	for range 3 {
		failN(ps, 0, 2)
		if isolated(ps, 0) {
			t.Fatal("isolated by failures that successes separated")
		}
		ps.Complete(0, breaker.Success)
	}
	failN(ps, 0, 3)
	if !isolated(ps, 0) {
		t.Fatal("not isolated by 3 consecutive failures after a success")
	}
}

// An isolated partition's probe: one call when the isolation ends, another only when
// the probe's outcome never came for an isolation's length. A failed probe isolates
// again from its failure, keeping when the isolation began and counting the failure;
// a failure that was not the probe's (a call sent before the isolation) changes nothing.
func TestPartitionProbeRules(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 4) // 3 failures isolate for 10 s
	failN(ps, 0, 3)
	clock.Advance(5 * time.Second)
	ps.Complete(0, breaker.Failure) // a late answer of a call sent before the isolation
	clock.Advance(5 * time.Second)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe 10 s after the isolation began: %v", err)
	}
	if ps.Admit(0) == nil {
		t.Fatal("a second probe while the first is out")
	}
	clock.Advance(10*time.Second - time.Millisecond)
	if ps.Admit(0) == nil {
		t.Fatal("a second probe before the first was given up")
	}
	clock.Advance(time.Millisecond)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("the unanswered probe not given up after an isolation's length: %v", err)
	}
	ps.Complete(0, breaker.Failure) // the probe failed: isolated again from now
	clock.Advance(10*time.Second - time.Millisecond)
	if ps.Admit(0) == nil {
		t.Fatal("admitted within 10 s of a failed probe")
	}
	got := ps.Isolated()
	if len(got) != 1 || !got[0].Since.Equal(t0) || got[0].Failures != 4 {
		t.Fatalf("isolated %+v, want partition 0 since %v with 4 failures", got, t0)
	}
	clock.Advance(time.Millisecond)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe 10 s after the failed probe: %v", err)
	}
	ps.Complete(0, breaker.Neutral) // says nothing: the probe's place is free again
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe after a neutral one: %v", err)
	}
	ps.Complete(0, breaker.Success)
	if isolated(ps, 0) || ps.Admit(0) != nil {
		t.Fatal("a successful probe did not end the isolation")
	}
}

// A new leader for a partition (after leader 0, recorded before any call) ends the evidence gathered about
// the old one; a leader that is not known (negative) changes nothing.
func TestPartitionNewLeaderEndsItsIsolation(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 4)
	ps.Leader(0, 0)
	failN(ps, 0, 3)
	ps.Leader(0, -1)
	if !isolated(ps, 0) {
		t.Fatal("an unknown leader ended the isolation")
	}
	ps.Leader(0, 1)
	if isolated(ps, 0) {
		t.Fatal("a new leader did not end the isolation of broker 0's partition")
	}
}

// TopicOutcome: a Failure of partition 0 or of the last partition below MaxPartitions
// counts against the destination only when no other partition is answering.
func TestTopicOutcomeAtTheEdgesOfTheRange(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitionsOf(t, clock, policy.Circuit, registry.PartitionPolicy{Failures: 1, Isolation: time.Minute, MaxPartitions: 4})
	ps.SetCount(4)
	use(ps, 4)
	failN(ps, 1, 1)
	failN(ps, 2, 1)
	if got := ps.TopicOutcome(breaker.Failure, false, 4); got != breaker.Neutral {
		t.Errorf("a failure beyond MaxPartitions with partitions 0 and 3 answering: %v, want Neutral", got)
	}
	failN(ps, 3, 1)
	if got := ps.TopicOutcome(breaker.Failure, false, 0); got != breaker.Failure {
		t.Errorf("partition 0 failing, every other isolated: %v, want Failure", got)
	}
	if got := ps.TopicOutcome(breaker.Failure, false, 4); got != breaker.Neutral {
		t.Errorf("a failure beyond MaxPartitions with partition 0 answering: %v, want Neutral", got)
	}
}
