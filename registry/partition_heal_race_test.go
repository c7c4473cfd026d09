package registry

import (
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
)

// A Success that heals a partition while a Failure is isolating it (after its streak
// reached the threshold, before the isolation is stored) leaves it isolated with no
// streak; the next Success still ends that isolation: the healthy path's shortcut
// (no streak, no isolation) must not skip an isolated partition.
func TestSuccessHealsAnIsolationThatRacedASuccess(t *testing.T) {
	ps, err := mrNewRegistry(t, WithPartitionPolicy(PartitionPolicy{Failures: 1})).Partitions(mrOrders)
	if err != nil {
		t.Fatal(err)
	}
	raced := false
	mrSetHook(t, &testHookIsolating, func() {
		testHookIsolating = nil
		raced = true
		ps.Complete(3, breaker.Success) // heals the streak the Failure just counted
	})
	ps.Complete(3, breaker.Failure)
	if !raced {
		t.Fatal("the hook did not run: the test no longer reaches the race")
	}
	iso := ps.Isolated()
	if len(iso) != 1 || iso[0].Partition != 3 || iso[0].Failures != 0 {
		t.Fatalf("after the race: isolated %+v, want partition 3 with no streak", iso)
	}
	ps.Complete(3, breaker.Success)
	if iso := ps.Isolated(); iso != nil {
		t.Fatalf("after the next Success: isolated %+v, want none", iso)
	}
	if err := ps.Admit(3); err != nil {
		t.Fatalf("Admit(3) after the Success: %v", err)
	}
}
