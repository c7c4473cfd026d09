package saramaguard_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only, with sarama: see the kafka-go
// scenario in integration/kafka. BROKERGUARD_PARTITION_CHAOS=long runs the issue's
// 200 callers for 20 s a phase.
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	// Twice the other clients' phase: a sarama call to the hung broker waits out the
	// read timeout and then a metadata refresh, so the dead partitions' five failures
	// in a row come late (one run of three under load saw none refused in 6 s).
	phase, callers, deadline := 2*harness.PartitionPhase, 40, harness.PartitionDeadline
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
			p, _ := sarama.NewHashPartitioner("").Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, parts)
			return int(p)
		},
		IsRefusal: func(err error) bool { return errors.Is(err, breaker.ErrOpen) },
	}
	producer := func(partitioner sarama.PartitionerConstructor) sarama.SyncProducer {
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Retry.Max = 0
		cfg.Net.DialTimeout = deadline
		cfg.Net.ReadTimeout = deadline // sarama takes no context: this bounds a hung call
		cfg.Net.WriteTimeout = deadline
		cfg.Metadata.Retry.Max = 1
		cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
		if partitioner != nil {
			cfg.Producer.Partitioner = partitioner
		}
		p, err := sarama.NewSyncProducer(cluster.ListenAddrs(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	message := func(topic string, key []byte) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("v")}
		if key != nil {
			m.Key = sarama.ByteEncoder(key)
		}
		return m
	}
	setups := []harness.PartitionSetup{
		{Name: "no breaker", Publish: func(topic string) func(context.Context, []byte) error {
			p := producer(nil)
			return func(_ context.Context, key []byte) error {
				_, _, err := p.SendMessage(message(topic, key))
				return err
			}
		}},
		{Name: "README policy (consecutive 5), partitioner", Publish: func(topic string) func(context.Context, []byte) error {
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := saramaguard.NewSyncProducer(producer(saramaguard.Partitioner(reg, nil)), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: saramaguard.Broker, Name: topic}
			t.Cleanup(func() {
				if s := reg.Snapshots()[d]; s.State != breaker.Closed {
					t.Errorf("the topic's circuit is %v: one broker of three opened it", s.State)
				}
				t.Logf("isolated at the end: %+v", reg.IsolatedPartitions(d))
			})
			return func(ctx context.Context, key []byte) error {
				_, _, err := p.SendMessage(ctx, message(topic, key))
				return err
			}
		}},
	}
	rows := harness.RunPartitionSetups(t, cluster, faults, node, parts, load, phase, setups)
	harness.PrintPartitionTable(os.Stdout, "sarama", rows)
	harness.CheckPartitionRows(t, rows[0], rows[1], callers)
}
