package registry

import (
	"testing"

	"github.com/brokerguard/brokerguard/transport"
)

// New circuits wait in the locked fresh map until creation-path calls that missed
// the read map have paid for copying it: once those misses reach the number of fresh
// entries, every fresh entry moves to the read map, and lookups of it no longer take
// the lock. The count starts again after each move.
func TestFreshCircuitsMoveToTheReadMapOnceTheirMissesPayForTheCopy(t *testing.T) {
	r := mrNewRegistry(t)
	missed := 0
	mrSetHook(t, &testHookLookupMissed, func() { missed++ })
	locked := func(d transport.Destination) bool { // Lookup(d) had to take the lock
		t.Helper()
		before := missed
		if _, ok := r.Lookup(d); !ok {
			t.Fatalf("%s not live", d)
		}
		return missed > before
	}
	circuit := func(d transport.Destination) {
		t.Helper()
		if _, err := r.Circuit(d); err != nil {
			t.Fatal(err)
		}
	}
	a, b := transport.Destination{Broker: "kafka", Name: "a"}, transport.Destination{Broker: "kafka", Name: "b"}
	c, d := transport.Destination{Broker: "kafka", Name: "c"}, transport.Destination{Broker: "kafka", Name: "d"}

	circuit(a)
	circuit(b) // two fresh entries
	circuit(a) // one miss: fewer than two
	if !locked(a) || !locked(b) {
		t.Fatal("one miss for two fresh circuits moved them")
	}
	circuit(b) // the second miss pays for the copy
	if locked(a) || locked(b) {
		t.Fatal("two misses for two fresh circuits did not move them to the read map")
	}

	circuit(c)
	circuit(d)
	circuit(c) // the count started again: one miss of two
	if !locked(c) || !locked(d) {
		t.Fatal("misses before the last move counted again")
	}
	circuit(d)
	if locked(c) || locked(d) {
		t.Fatal("two new misses did not move the two new circuits")
	}
}
