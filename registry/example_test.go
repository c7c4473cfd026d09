package registry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// publisherFunc adapts a function to transport.Publisher.
type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}

func ExampleRegistry_Guard() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}},
		registry.WithOverride("kafka:audit", registry.Policy{Circuit: breaker.DisabledPolicy()})) // never trip the audit topic
	if err != nil {
		panic(err)
	}
	// A publisher whose "payments" topic is down.
	raw := publisherFunc(func(_ context.Context, d transport.Destination, _ ...transport.Message) error {
		if d.Name == "payments" {
			return errors.New("connection refused")
		}
		return nil
	})
	pub := reg.Guard(raw, nil) // nil classifier: every error is a Failure

	ctx := context.Background()
	payments := transport.Destination{Broker: "kafka", Name: "payments"}
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	for range 3 {
		err := pub.Publish(ctx, payments, transport.Message{Value: []byte("charge")})
		fmt.Println("payments:", errors.Is(err, breaker.ErrOpen), err != nil)
	}
	fmt.Println("orders:", pub.Publish(ctx, orders, transport.Message{Value: []byte("order")}))
	fmt.Println("any open:", reg.IsAnyOpen())
	// Output:
	// payments: false true
	// payments: false true
	// payments: true true
	// orders: <nil>
	// any open: true
}

// A registry built WithCallCounts counts each guarded call by what its circuit made of
// it; Report hands the counts, with each live circuit's snapshot, to telemetry.
func ExampleRegistry_Report() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second}}, registry.WithCallCounts())
	if err != nil {
		panic(err)
	}
	down := publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error {
		return errors.New("connection refused")
	})
	pub := reg.Guard(down, nil)
	payments := transport.Destination{Broker: "kafka", Name: "payments"}
	for range 5 {
		_ = pub.Publish(context.Background(), payments, transport.Message{Value: []byte("charge")})
	}
	for _, c := range reg.Report() {
		fmt.Printf("%s %s: %+v\n", c.Destination, c.Snapshot.State, c.Calls)
	}
	// Output:
	// kafka:payments open: {Published:0 Failed:2 Rejected:3 Neutral:0 ProbesPublished:0 ProbesFailed:0 ProbesNeutral:0}
}
