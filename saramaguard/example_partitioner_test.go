package saramaguard_test

import (
	"log"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// A sarama AsyncProducer whose partitioner knows the topic's isolated partitions:
// keyed messages bound for one fail before they are sent, the others go elsewhere.
// (NewSyncProducer installs it by itself.)
func ExamplePartitioner() {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Partitioner = saramaguard.Partitioner(reg, sarama.NewHashPartitioner)
	p, err := saramaguard.NewAsyncProducer([]string{"127.0.0.1:9092"}, cfg, reg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
}
