package kafka_test

import (
	"context"
	"fmt"

	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A writer with the recommended settings, guarded once: the registry is built at
// start-up and shared.
func ExampleNewWriter() {
	reg, err := registry.New(registry.DefaultPolicy())
	if err != nil {
		panic(err)
	}
	w := kafka.NewWriter("127.0.0.1:9092")
	fmt.Println(w.RequiredAcks, w.BatchTimeout, w.MaxAttempts)
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		panic(err)
	}
	defer pub.Close(context.Background())
	_ = func(ctx context.Context) error { // in a request handler
		return pub.Publish(ctx, kafka.Topic("orders"), transport.Message{Key: []byte("o-1"), Value: []byte("{}")})
	}
	// Output: all 5ms 2
}
