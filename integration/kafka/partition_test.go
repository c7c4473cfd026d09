package kafka_test

import (
	"context"
	"errors"
	"os"
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

// One broker of three down costs its partitions only: keyed calls to the others keep
// their goodput, keyed calls to the dead one are refused fast once its partitions
// are isolated, and unkeyed calls avoid them. The short run is part of make test;
// BROKERGUARD_PARTITION_CHAOS=long runs the 200 callers for 20 s a phase.
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	phase, callers, deadline := harness.PartitionPhase, 40, harness.PartitionDeadline
	if os.Getenv("BROKERGUARD_PARTITION_CHAOS") == "long" {
		// The scenario, as docs/partitions.md reports it: 500 ms deadlines.
		phase, callers, deadline = 20*time.Second, 200, 500*time.Millisecond
	}
	faults := &harness.BrokerFaults{}
	cluster := harness.KFake(t, kfake.NumBrokers(3), faults.Opt())
	const parts, node = 6, 1
	hash := &kafkago.Hash{}
	all := []int{0, 1, 2, 3, 4, 5}
	load := harness.PartitionLoad{
		Callers: callers, Deadline: deadline, UnkeyedEvery: 4, Keys: harness.Keys(600),
		PartitionOf: func(key []byte) int { return hash.Balance(kafkago.Message{Key: key}, all...) },
		IsRefusal:   func(err error) bool { return errors.Is(err, breaker.ErrOpen) },
	}
	writer := func(topic string) *kafkago.Writer {
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
	setups := []harness.PartitionSetup{
		{Name: "no breaker", Publish: func(topic string) func(context.Context, []byte) error {
			w := writer(topic)
			return func(ctx context.Context, key []byte) error {
				return w.WriteMessages(ctx, kafkago.Message{Key: key, Value: []byte("v")})
			}
		}},
		{Name: "README policy (consecutive 5), partitions on", Publish: func(topic string) func(context.Context, []byte) error {
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}})
			if err != nil {
				t.Fatal(err)
			}
			pub, err := kafka.NewPublisher(writer(topic), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: kafka.Broker, Name: topic}
			t.Cleanup(func() {
				if s := reg.Snapshots()[d]; s.State != breaker.Closed {
					t.Errorf("the topic's circuit is %v: one broker of three opened it", s.State)
				}
				t.Logf("isolated at the end: %+v", reg.IsolatedPartitions(d))
			})
			return func(ctx context.Context, key []byte) error {
				return pub.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
			}
		}},
	}
	rows := harness.RunPartitionSetups(t, cluster, faults, node, parts, load, phase, setups)
	harness.PrintPartitionTable(os.Stdout, "kafka-go", rows)
	harness.CheckPartitionRows(t, rows[0], rows[1], callers)
}
