package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// printer is a publisher that prints what it is given.
type printer struct{}

func (printer) Publish(_ context.Context, d transport.Destination, msgs ...transport.Message) error {
	for _, m := range msgs {
		fmt.Printf("publish %s %s\n", d, m.Value)
	}
	return nil
}

// A Processor claims a batch, publishes each destination's rows through the guarded
// publisher and marks them published.
func ExampleProcessor() {
	ctx := context.Background()
	store := memory.New(nil)
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	proc, _ := outbox.NewProcessor(store, reg, reg.Guard(printer{}, nil))

	orders, _ := transport.ParseDestination("kafka:orders")
	store.Enqueue(ctx,
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 1")}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 2")}})

	rep, _ := proc.ProcessPending(ctx)
	fmt.Printf("claimed %d, %+v\n", rep.Claimed, rep.Total())
	// Output:
	// publish kafka:orders order 1
	// publish kafka:orders order 2
	// claimed 2, {Published:2 Deferred:0 Failed:0 Dead:0}
}

// While a destination's circuit is open the destination is held until the circuit's
// deadline: its rows are given back without consuming an attempt and not claimed
// again before then, and the other destinations go on.
func ExampleProcessor_openCircuit() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(clock)
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}}, registry.WithClock(clock))
	proc, _ := outbox.NewProcessor(store, reg, reg.Guard(printer{}, nil),
		outbox.WithClock(clock), outbox.WithDeferralJitter(0))

	orders, _ := transport.ParseDestination("kafka:orders")
	emails, _ := transport.ParseDestination("kafka:emails")
	ids, _ := store.Enqueue(ctx,
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 1")}},
		outbox.Entry{Destination: emails, Message: transport.Message{Value: []byte("welcome")}})

	c, _ := reg.Circuit(orders)
	c.(*breaker.Breaker).ForceOpen(clock.Now().Add(time.Minute)) // as if the topic were failing

	rep, _ := proc.ProcessPending(ctx)
	fmt.Printf("orders %+v\n", rep.ByDestination[orders])
	r, _ := store.Get(ids[0])
	until, _ := store.HeldUntil(orders)
	fmt.Printf("row %d: %s, attempts %d, deferrals %d; %s held until %s\n",
		r.ID, r.Status, r.Attempts, r.Deferrals, orders, until.Format("15:04:05"))
	// Output:
	// publish kafka:emails welcome
	// orders {Published:0 Deferred:1 Failed:0 Dead:0}
	// row 1: pending, attempts 0, deferrals 1; kafka:orders held until 09:01:00
}
