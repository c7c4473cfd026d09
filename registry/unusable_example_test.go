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

type refusing struct{}

func (refusing) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return errors.New("403 ACCESS_REFUSED: no write permission on orders")
}

// A destination the broker refuses: the circuit stays closed (the broker is healthy),
// and its snapshot says why the destination cannot take messages.
func ExampleRegistry_Snapshot() {
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	pub := reg.Guard(refusing{}, func(error) breaker.Outcome { return breaker.Unusable })
	orders := transport.Destination{Broker: "amqp", Name: "orders"}
	for range 3 {
		_ = pub.Publish(context.Background(), orders, transport.Message{Value: []byte("x")})
	}
	s, _ := reg.Snapshot(orders)
	fmt.Println(s.State, s.Failures)
	fmt.Println(s.Unusable)
	// Output:
	// closed 0
	// 403 ACCESS_REFUSED: no write permission on orders
}
