package saramaguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// One broker of three down costs its partitions only, with sarama and the
// partitioner saramaguard.NewSyncProducer installs (harness.RunPartitionScenario).
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	config := func(deadline time.Duration) *sarama.Config {
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Retry.Max = 0
		cfg.Net.DialTimeout = deadline
		cfg.Net.ReadTimeout = deadline // sarama takes no context: this bounds a hung call
		cfg.Net.WriteTimeout = deadline
		cfg.Metadata.Retry.Max = 1
		cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
		return cfg
	}
	message := func(topic string, key []byte) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("v")}
		if key != nil {
			m.Key = sarama.ByteEncoder(key)
		}
		return m
	}
	harness.RunPartitionScenario(t, harness.PartitionClient{
		Name: "sarama",
		PartitionOf: func(key []byte, n int) int {
			p, _ := sarama.NewHashPartitioner("").Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, int32(n))
			return int(p)
		},
		// A sarama call to the hung broker waits out the read timeout and then a
		// metadata refresh, so the dead partitions' five failures in a row come late
		// (one run of three under load saw none refused in 6 s).
		PhaseFactor: 2,
		Raw: func(cluster *kfake.Cluster, topic string, deadline time.Duration) harness.PublishKey {
			p, err := sarama.NewSyncProducer(cluster.ListenAddrs(), config(deadline))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return func(_ context.Context, key []byte) error {
				_, _, err := p.SendMessage(message(topic, key))
				return err
			}
		},
		Guarded: func(cluster *kfake.Cluster, reg *registry.Registry, topic string, deadline time.Duration) harness.PublishKey {
			p, err := saramaguard.NewSyncProducer(cluster.ListenAddrs(), config(deadline), reg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return func(ctx context.Context, key []byte) error {
				_, _, err := p.SendMessage(ctx, message(topic, key))
				return err
			}
		},
	})
}
