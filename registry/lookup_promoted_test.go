package registry

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

var mrOrders = transport.Destination{Broker: "kafka", Name: "orders"}

// mrNewRegistry is New with a one-failure policy, failing the test on an error.
func mrNewRegistry(t *testing.T, opts ...Option) *Registry {
	t.Helper()
	r, err := New(Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mrSetHook sets *hook to f for the rest of the test.
func mrSetHook(t *testing.T, hook *func(), f func()) {
	t.Helper()
	*hook = f
	t.Cleanup(func() { *hook = nil })
}

// A lookup that misses the read map and then finds the entry gone from fresh (another
// caller promoted it while the lookup waited for the lock) finds it in the new read
// map: a live circuit is never reported missing.
func TestLookupFindsTheCircuitPromotedWhileItWaited(t *testing.T) {
	r, d := mrNewRegistry(t), mrOrders
	c, err := r.Circuit(d) // created in fresh
	if err != nil {
		t.Fatal(err)
	}
	promoted := false
	mrSetHook(t, &testHookLookupMissed, func() {
		testHookLookupMissed = nil
		// A second creation-path call is the fresh map's only miss: it promotes.
		if _, err := r.Circuit(d); err != nil {
			t.Error(err)
		}
		r.mu.Lock()
		promoted = len(r.fresh) == 0 && (*r.circuits.Load())[d] != nil
		r.mu.Unlock()
	})
	got, ok := r.Lookup(d)
	if !promoted {
		t.Fatal("the hook did not promote the entry: the test no longer reaches the race")
	}
	if !ok || got != c {
		t.Fatalf("Lookup after a promotion while it waited = %v, %v; want the live circuit", got, ok)
	}
}
