package kgoguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only, with franz-go and the
// partitioner kgoguard.New requires (harness.RunPartitionScenario).
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	client := func(cluster *kfake.Cluster, deadline time.Duration, opts ...kgo.Opt) *kgo.Client {
		// A record in flight is failed only when its request ends, whatever its
		// context says: these bound a hung broker's requests to about the deadline.
		return newClient(t, cluster, append([]kgo.Opt{
			kgo.RecordDeliveryTimeout(deadline + 500*time.Millisecond), kgo.ProduceRequestTimeout(deadline),
			kgo.RequestTimeoutOverhead(500 * time.Millisecond),
		}, opts...)...)
	}
	harness.RunPartitionScenario(t, harness.PartitionClient{
		Name: "franz-go",
		PartitionOf: func(key []byte, n int) int {
			return kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, n)
		},
		Raw: func(cluster *kfake.Cluster, topic string, deadline time.Duration) harness.PublishKey {
			cl := client(cluster, deadline)
			return func(ctx context.Context, key []byte) error {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: []byte("v")}).FirstErr()
			}
		},
		Guarded: func(cluster *kfake.Cluster, reg *registry.Registry, topic string, deadline time.Duration) harness.PublishKey {
			p, err := kgoguard.New(client(cluster, deadline, kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil))), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: kgoguard.Broker, Name: topic}
			return func(ctx context.Context, key []byte) error {
				return p.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
			}
		},
	})
}
