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
	reg, err := registry.New(breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		registry.WithOverride("kafka:audit", breaker.Policy{})) // never trip the audit topic
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
