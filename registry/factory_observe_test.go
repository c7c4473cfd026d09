package registry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// mrObservedCircuit is a factory's circuit that accepts observers and counts them.
type mrObservedCircuit struct {
	breaker.Circuit
	observers int
}

func (c *mrObservedCircuit) Observe(any, func(breaker.Transition)) { c.observers++ }

// A registry attaches itself to a factory's observable circuit only when it has
// observers to report to: without them it leaves the circuit alone (no reference to
// the registry kept by a circuit the factory may share, no transitions queued for
// nobody).
func TestFactoryCircuitIsObservedOnlyForTheRegistrysObservers(t *testing.T) {
	shared := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency}
	for _, observers := range []int{0, 1} {
		local, err := breaker.New("kafka:orders", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		c := &mrObservedCircuit{Circuit: local}
		opts := []registry.Option{
			registry.WithCircuitFactory(breaker.SharedDependency, func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
				return c, nil
			}),
		}
		for range observers {
			opts = append(opts, registry.WithObserver(func(transport.Destination, breaker.Transition) {}))
		}
		r, err := registry.New(registry.Policy{Circuit: shared}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Circuit(orders); err != nil {
			t.Fatal(err)
		}
		if c.observers != observers {
			t.Fatalf("with %d observers the registry attached %d times, want %d", observers, c.observers, observers)
		}
	}
}
