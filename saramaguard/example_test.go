package saramaguard_test

import (
	"context"
	"log"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// A sarama SyncProducer guarded per topic and, through the partitioner
// NewSyncProducer installs, per partition.
func ExampleNewSyncProducer() {
	cfg := sarama.NewConfig()
	cfg.Producer.Retry.Max = 1
	cfg.Net.ReadTimeout = 3 * time.Second
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	p, err := saramaguard.NewSyncProducer([]string{"127.0.0.1:9092"}, cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(context.Background(), &sarama.ProducerMessage{Topic: "orders", Value: sarama.StringEncoder("o-1")}); err != nil {
		log.Print(err)
	}
}
