package kafka_test

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only: keyed calls to the others keep
// their goodput, keyed calls to the dead one are refused fast once its partitions
// are isolated, and unkeyed calls avoid them (harness.RunPartitionScenario).
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	hash := &kafkago.Hash{}
	writer := func(cluster *kfake.Cluster, topic string, deadline time.Duration) *kafkago.Writer {
		w := &kafkago.Writer{
			Addr: kafkago.TCP(cluster.ListenAddrs()...), Topic: topic, Balancer: &kafkago.Hash{},
			// Each writer its own transport: kafka-go's shared default transport kept
			// metadata from before the test moved the partitions' leaders.
			Transport:    &kafkago.Transport{MetadataTTL: time.Second},
			RequiredAcks: kafkago.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond,
			WriteTimeout: deadline, ReadTimeout: max(deadline, 2*time.Second),
		}
		t.Cleanup(func() { w.Close(); w.Transport.(*kafkago.Transport).CloseIdleConnections() })
		return w
	}
	harness.RunPartitionScenario(t, harness.PartitionClient{
		Name: "kafka-go",
		PartitionOf: func(key []byte, n int) int {
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			return hash.Balance(kafkago.Message{Key: key}, all...)
		},
		Raw: func(cluster *kfake.Cluster, topic string, deadline time.Duration) harness.PublishKey {
			w := writer(cluster, topic, deadline)
			return func(ctx context.Context, key []byte) error {
				return w.WriteMessages(ctx, kafkago.Message{Key: key, Value: []byte("v")})
			}
		},
		Guarded: func(cluster *kfake.Cluster, reg *registry.Registry, topic string, deadline time.Duration) harness.PublishKey {
			pub, err := kafka.NewPublisher(writer(cluster, topic, deadline), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: kafka.Broker, Name: topic}
			return func(ctx context.Context, key []byte) error {
				return pub.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
			}
		},
	})
}
