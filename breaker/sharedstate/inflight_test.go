package sharedstate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// MaxInFlight under contention: callers turned away never show in the count, so a
// Snapshot taken at any moment reports at most MaxInFlight in flight.
func TestInFlightNeverOverMaxInFlight(t *testing.T) {
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
		Policy: breaker.Policy{Scope: breaker.SharedDependency, MaxInFlight: 1}, Driver: &circuittest.MemoryDriver{}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Complete(breaker.Success)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if p, err := c.Acquire(context.Background()); err == nil {
					p.Complete(breaker.Success)
					t.Error("admitted over MaxInFlight")
				}
			}
		})
	}
	for range 20000 {
		if n := c.Snapshot().InFlight; n != 1 {
			t.Errorf("InFlight %d while one permit is held at MaxInFlight 1", n)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}
