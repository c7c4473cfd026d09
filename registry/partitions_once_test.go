package registry

import "testing"

// Two callers that create a destination's partition evidence at once get the same
// Partitions: the one that publishes second takes the first's, so evidence recorded
// through either is one destination's evidence.
func TestPartitionsCreatedAtOnceAreOne(t *testing.T) {
	r, d := mrNewRegistry(t), mrOrders
	var other *Partitions
	mrSetHook(t, &testHookPartitionsBuilt, func() {
		testHookPartitionsBuilt = nil
		var err error
		if other, err = r.Partitions(d); err != nil {
			t.Error(err)
		}
	})
	ps, err := r.Partitions(d)
	if err != nil {
		t.Fatal(err)
	}
	if other == nil {
		t.Fatal("the hook did not run: the test no longer reaches the race")
	}
	if ps != other {
		t.Fatalf("two Partitions for %s: %p and %p", d, ps, other)
	}
	if again, _ := r.Partitions(d); again != ps {
		t.Fatalf("a later call got %p, want %p", again, ps)
	}
}
