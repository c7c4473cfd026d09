package kgoguard_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A client whose partitioner knows the topic's isolated partitions: keyed records
// bound for one are refused before they are buffered, unkeyed ones go elsewhere.
func ExamplePartitioner() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil)),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	p, err := kgoguard.New(cl, reg)
	if err != nil {
		log.Fatal(err)
	}
	err = p.Publish(context.Background(), transport.Destination{Broker: kgoguard.Broker, Name: "orders"},
		transport.Message{Key: []byte("customer-7"), Value: []byte("paid")})
	if pe, ok := errors.AsType[*registry.PartitionRejectedError](err); ok {
		log.Printf("partition %d of %s is isolated until %v", pe.Partition, pe.Destination, pe.Err.NotBefore)
	}
}
