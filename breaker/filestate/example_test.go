package filestate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Two stores on one root stand for two worker processes of one service: what one
// records, the other sees once its snapshot is older than the staleness bound (0 here).
func Example() {
	dir, err := os.MkdirTemp("", "filestate-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "circuits")
	policy := breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second, Scope: breaker.SingleHost}

	worker1, _ := filestate.Open(root, sharedstate.WithMaxStaleness(0))
	worker2, _ := filestate.Open(root, sharedstate.WithMaxStaleness(0))
	c1, _ := worker1.Circuit("billing-api", policy)
	c2, _ := worker2.Circuit("billing-api", policy)

	ctx := context.Background()
	for range 2 { // worker 1's calls fail
		p, _ := c1.Acquire(ctx)
		p.Complete(breaker.Failure)
	}
	_, err = c2.Acquire(ctx)
	fmt.Println("worker 2 rejected:", errors.Is(err, breaker.ErrOpen))

	// An operator starts the circuit afresh.
	if err := worker2.Clear("billing-api"); err != nil {
		panic(err)
	}
	p, err := c1.Acquire(ctx)
	fmt.Println("worker 1 after Clear:", err, p.Complete(breaker.Success))
	// Output:
	// worker 2 rejected: true
	// worker 1 after Clear: <nil> true
}

// A registry hands out file circuits for the destinations whose policy has scope
// SINGLE_HOST.
func ExampleStore_Factory() {
	dir, err := os.MkdirTemp("", "filestate-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := filestate.Open(filepath.Join(dir, "circuits"))
	if err != nil {
		panic(err)
	}
	reg, err := registry.New(
		registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Scope: breaker.SingleHost}},
		registry.WithCircuitFactory(breaker.SingleHost, store.Factory()))
	if err != nil {
		panic(err)
	}
	c, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: "orders"})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Snapshot().Scope, c.(*filestate.Circuit).Identity())
	// Output: SINGLE_HOST kafka:orders
}
