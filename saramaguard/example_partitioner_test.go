package saramaguard_test

import (
	"log"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// A sarama producer whose partitioner knows the topic's isolated partitions: keyed
// messages bound for one fail before they are sent, the others go elsewhere.
func ExamplePartitioner() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = saramaguard.Partitioner(reg, nil)
	sp, err := sarama.NewSyncProducer([]string{"127.0.0.1:9092"}, cfg)
	if err != nil {
		log.Fatal(err)
	}
	p, err := saramaguard.NewSyncProducer(sp, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
}
