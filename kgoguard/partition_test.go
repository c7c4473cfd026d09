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
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only, with franz-go: see the
// kafka-go scenario in integration/kafka. BROKERGUARD_PARTITION_CHAOS=long runs the
// issue's 200 callers for 20 s a phase.
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	phase, callers, deadline := harness.PartitionPhase, 40, harness.PartitionDeadline
	if os.Getenv("BROKERGUARD_PARTITION_CHAOS") == "long" {
		// The scenario, as docs/partitions.md reports it: 500 ms deadlines.
		phase, callers, deadline = 20*time.Second, 200, 500*time.Millisecond
	}
	faults := &harness.BrokerFaults{}
	cluster := harness.KFake(t, kfake.NumBrokers(3), faults.Opt())
	const parts, node = 6, 1
	load := harness.PartitionLoad{
		Callers: callers, Deadline: deadline, UnkeyedEvery: 4, Keys: harness.Keys(600),
		PartitionOf: func(key []byte) int {
			return kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, parts)
		},
		IsRefusal: func(err error) bool { return errors.Is(err, breaker.ErrOpen) },
	}
	client := func(opts ...kgo.Opt) *kgo.Client {
		// A record in flight is failed only when its request ends, whatever its
		// context says: these bound a hung broker's requests to about the deadline.
		return newClient(t, cluster, append([]kgo.Opt{
			kgo.RecordDeliveryTimeout(deadline + 500*time.Millisecond), kgo.ProduceRequestTimeout(deadline),
			kgo.RequestTimeoutOverhead(500 * time.Millisecond),
		}, opts...)...)
	}
	setups := []harness.PartitionSetup{
		{Name: "no breaker", Publish: func(topic string) func(context.Context, []byte) error {
			cl := client()
			return func(ctx context.Context, key []byte) error {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: []byte("v")}).FirstErr()
			}
		}},
		{Name: "README policy (consecutive 5), partitioner", Publish: func(topic string) func(context.Context, []byte) error {
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}})
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
	rows := harness.RunPartitionSetups(t, cluster, faults, node, parts, load, phase, setups)
	harness.PrintPartitionTable(os.Stdout, "franz-go", rows)
	harness.CheckPartitionRows(t, rows[0], rows[1], callers)
}
