package kgoguard_test

import (
	"context"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
)

// A franz-go client guarded per topic and per partition: Produce keeps franz-go's
// promise, and the promise gets the refusal when the topic's circuit is open or the
// record's partition is isolated.
func ExampleNew() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.RecordRetries(2),
		kgo.RecordDeliveryTimeout(5*time.Second),
		kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil)), // New requires it
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	p, err := kgoguard.New(cl, reg)
	if err != nil {
		log.Fatal(err)
	}
	p.Produce(context.Background(), &kgo.Record{Topic: "orders", Value: []byte("o-1")}, func(r *kgo.Record, err error) {
		if err != nil {
			log.Printf("order %s: %v", r.Value, err)
		}
	})
	if err := cl.Flush(context.Background()); err != nil {
		log.Print(err)
	}
}
