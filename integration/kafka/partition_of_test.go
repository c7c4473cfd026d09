package kafka_test

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// PartitionOf, which the outbox asks, names the partition the writer really
// writes a key to; with kafka-go's RoundRobin it places no key.
func TestPartitionOfMatchesTheWriter(t *testing.T) {
	cluster := harness.KFake(t, kfake.NumBrokers(1))
	topic := harness.TopicNames("partition-of")[0]
	if err := cluster.CreateTopic(topic, 6, nil); err != nil {
		t.Fatal(err)
	}
	newPub := func(b kafkago.Balancer) *kafka.Publisher {
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		tr := &kafkago.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		pub, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP(cluster.ListenAddrs()...), Topic: topic,
			Balancer: b, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireOne}, reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close(context.Background()) })
		return pub
	}
	d := transport.Destination{Broker: kafka.Broker, Name: topic}
	pub := newPub(&kafkago.Murmur2Balancer{})
	keys := harness.Keys(40)
	if _, _, ok := pub.PartitionOf(d, keys[0]); ok {
		t.Fatal("a key placed before the writer knew the partitions")
	}
	for _, k := range keys {
		if err := pub.Publish(context.Background(), d, transport.Message{Key: k, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range harness.ReadTopic(t, cluster.ListenAddrs(), topic, len(keys)) {
		p, until, ok := pub.PartitionOf(d, r.Key)
		if !ok || p != int(r.Partition) || !until.IsZero() {
			t.Fatalf("key %s: PartitionOf = %d, %v, %v; written to %d", r.Key, p, until, ok, r.Partition)
		}
	}
	rr := newPub(nil)
	if err := rr.Publish(context.Background(), d, transport.Message{Key: keys[0], Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := rr.PartitionOf(d, keys[0]); ok {
		t.Fatal("RoundRobin placed a key")
	}
}
