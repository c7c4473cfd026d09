package kgoguard_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/integration/harness"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only, with franz-go: see the
// kafka-go scenario in integration/kafka. BROKERGUARD_PARTITION_CHAOS=long runs the
// issue's 200 callers for 20 s a phase.
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	phase, callers := 1500*time.Millisecond, 40
	if os.Getenv("BROKERGUARD_PARTITION_CHAOS") == "long" {
		phase, callers = 20*time.Second, 200
	}
	faults := &harness.BrokerFaults{}
	cluster := harness.KFake(t, kfake.NumBrokers(3), faults.Opt())
	const parts, node = 6, 1
	load := harness.PartitionLoad{
		Callers: callers, Deadline: 500 * time.Millisecond, UnkeyedEvery: 4, Keys: harness.Keys(600),
		PartitionOf: func(key []byte) int {
			return kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, parts)
		},
		IsRefusal: func(err error) bool { return errors.Is(err, breaker.ErrOpen) },
	}
	client := func(opts ...kgo.Opt) *kgo.Client {
		// A record in flight is failed only when its request ends, whatever its
		// context says: these bound a hung broker's requests to about a second.
		return newClient(t, cluster, append([]kgo.Opt{
			kgo.RecordDeliveryTimeout(time.Second), kgo.ProduceRequestTimeout(500 * time.Millisecond),
			kgo.RequestTimeoutOverhead(500 * time.Millisecond),
		}, opts...)...)
	}
	type setup struct {
		name    string
		publish func(t *testing.T, topic string) func(ctx context.Context, key []byte) error
	}
	setups := []setup{
		{"no breaker", func(t *testing.T, topic string) func(context.Context, []byte) error {
			cl := client()
			return func(ctx context.Context, key []byte) error {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: []byte("v")}).FirstErr()
			}
		}},
		{"README policy (consecutive 5), partitioner", func(t *testing.T, topic string) func(context.Context, []byte) error {
			reg, err := registry.New(breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2})
			if err != nil {
				t.Fatal(err)
			}
			p, err := kgoguard.New(client(kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil))), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: kgoguard.Broker, Name: topic}
			t.Cleanup(func() {
				if s := reg.Snapshots()[d]; s.State != breaker.Closed {
					t.Errorf("the topic's circuit is %v: one broker of three opened it", s.State)
				}
				t.Logf("isolated at the end: %+v", reg.IsolatedPartitions(d))
			})
			return func(ctx context.Context, key []byte) error {
				return p.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
			}
		}},
	}
	var rows []harness.PartitionRow
	for i, s := range setups {
		topic := harness.TopicNames("partitions")[0] + string(rune('a'+i))
		dead := partitionTopic(t, cluster, topic, parts, node)
		db := harness.DeadBroker{Faults: faults, Node: node, Dead: dead}
		publish := s.publish(t, topic)
		harness.RunPartitionPhase(load, db, harness.Healthy, 300*time.Millisecond, publish) // warm up
		row := harness.PartitionRow{Setup: s.name}
		row.Hung = harness.RunPartitionPhase(load, db, harness.BlackHole, phase, publish)
		row.Refused = harness.RunPartitionPhase(load, db, harness.Refuse, phase, publish)
		faults.Set(node, harness.Healthy)
		rows = append(rows, row)
	}
	harness.PrintPartitionTable(os.Stdout, "franz-go", rows)
	harness.CheckPartitionRows(t, rows[0], rows[1], callers)
}

// partitionTopic creates topic with parts partitions, led in turn by the three
// brokers, and returns which partitions node leads.
func partitionTopic(t *testing.T, cluster *kfake.Cluster, topic string, parts, node int) []bool {
	t.Helper()
	if err := cluster.CreateTopic(topic, int32(parts), nil); err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		if err := cluster.MoveTopicPartition(topic, p, p%3); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := harness.DeadPartitions(parts, node, func(p int32) int32 { return cluster.LeaderFor(topic, p) })
	if err != nil {
		t.Fatal(err)
	}
	return dead
}
