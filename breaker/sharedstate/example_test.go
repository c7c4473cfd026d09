package sharedstate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// Two replicas share one circuit through a store (here in memory; a backend passes its
// own Driver). An operator's ForceOpen on one holds on the other once it reads the
// record, within MaxStaleness.
func Example() {
	store := &circuittest.MemoryDriver{}
	replica := func(owner string) *sharedstate.Circuit {
		c, err := sharedstate.New(sharedstate.Config{
			Identity: "kafka:orders", Scope: breaker.SharedDependency, Driver: store, Owner: owner,
			Policy:       breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second, Scope: breaker.SharedDependency},
			MaxStaleness: -1, // read the record on every call, for the example
		})
		if err != nil {
			panic(err)
		}
		return c
	}
	a, b := replica("a"), replica("b")
	ctx := context.Background()

	p, err := b.Acquire(ctx)
	fmt.Println("b admits:", err == nil)
	p.Complete(breaker.Success)

	if err := a.ForceOpen(ctx, time.Now().Add(time.Minute)); err != nil {
		panic(err)
	}
	_, err = b.Acquire(ctx)
	fmt.Println("b after a's ForceOpen:", b.Snapshot().Override, verdict(err))
	// Output:
	// b admits: true
	// b after a's ForceOpen: forced-open rejected
}

func verdict(err error) string {
	if err != nil {
		return "rejected"
	}
	return "admitted"
}
