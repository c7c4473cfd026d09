package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// PublishKey publishes one message with key (nil: unkeyed) to the topic it was made
// for.
type PublishKey func(ctx context.Context, key []byte) error

// PartitionClient is one Kafka client in the partition outage scenario
// (RunPartitionScenario): where its default partitioner puts a key, and how to
// publish through it alone and through its brokerguard adapter.
type PartitionClient struct {
	Name string // in the table: "franz-go"
	// PartitionOf is the partition of n the client's default partitioner gives key.
	PartitionOf func(key []byte, n int) int
	// PhaseFactor stretches the phases for a client whose calls to a hung broker end
	// late (sarama waits out its read timeout, then a metadata refresh); 0 means 1.
	PhaseFactor int
	// Raw publishes to topic through the client alone; Guarded through the adapter,
	// made with its defaults over reg. Both bound a request by deadline, and are
	// called once per topic.
	Raw     func(cluster *kfake.Cluster, topic string, deadline time.Duration) PublishKey
	Guarded func(cluster *kfake.Cluster, reg *registry.Registry, topic string, deadline time.Duration) PublishKey
}

// partitionScenarioPolicy is the guarded set-up's circuit policy: the README's.
var partitionScenarioPolicy = breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}

// RunPartitionScenario runs one broker of three down (its partitions' leader hung,
// then refusing connections) against c without a breaker and through its adapter
// with the adapter's defaults, prints the table and checks the guarded row
// (checkPartitionRows), and that the topic's circuit stayed closed.
//
// It has three sizes: the default (40 callers, partitionPhase a phase); -short
// (16 callers, the refusing phase only, 1.5 s, no no-fault phase: the cheap form
// make test-unit runs);
// and BROKERGUARD_PARTITION_CHAOS=long (the 200 callers with 500 ms
// deadlines, 20 s a phase, as docs/partitions.md reports it).
func RunPartitionScenario(t *testing.T, c PartitionClient) {
	t.Helper()
	factor := time.Duration(max(c.PhaseFactor, 1))
	p := partitionPhases{Hung: factor * partitionPhase, Refused: factor * partitionPhase}
	callers, deadline := 40, partitionDeadline
	switch {
	case os.Getenv("BROKERGUARD_PARTITION_CHAOS") == "long":
		p.Hung, p.Refused, callers, deadline = 20*time.Second, 20*time.Second, 200, 500*time.Millisecond
	case testing.Short():
		p.Hung, p.Refused, callers = 0, 1500*time.Millisecond, 16
	}
	if !testing.Short() {
		p.NoFault = p.Refused
	}
	faults := &BrokerFaults{}
	cluster := KFake(t, kfake.NumBrokers(3), faults.Opt())
	const parts, node = 6, 1
	load := partitionLoad{
		Callers: callers, Deadline: deadline, UnkeyedEvery: 4, Keys: Keys(600),
		PartitionOf: func(key []byte) int { return c.PartitionOf(key, parts) },
		IsRefusal:   func(err error) bool { return errors.Is(err, breaker.ErrOpen) },
	}
	setups := []partitionSetup{
		{Name: "no breaker", Publish: func(topic string) func(context.Context, []byte) error {
			return c.Raw(cluster, topic, deadline)
		}},
		{Name: "adapter defaults, README policy (consecutive 5)", Publish: func(topic string) func(context.Context, []byte) error {
			reg, err := registry.New(registry.Policy{Circuit: partitionScenarioPolicy})
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: "kafka", Name: topic}
			t.Cleanup(func() {
				if s := reg.Snapshots()[d]; s.State != breaker.Closed {
					t.Errorf("the topic's circuit is %v: one broker of three opened it", s.State)
				}
				t.Logf("isolated at the end: %+v", reg.IsolatedPartitions(d))
			})
			return c.Guarded(cluster, reg, topic, deadline)
		}},
	}
	rows := runPartitionSetups(t, cluster, faults, node, parts, load, p, setups)
	printPartitionTable(os.Stdout, c.Name, rows)
	printNoFaultRatios(os.Stdout, rows)
	checkPartitionRows(t, rows[0], rows[1], callers)
}

// partitionPhases is how long each phase of a partition outage scenario runs; a
// phase of 0 is left out (its counts are nil).
type partitionPhases struct {
	NoFault, Hung, Refused time.Duration
}

// runPartitionSetups runs each set-up, on a topic of its own with parts partitions,
// through a short warm-up, then the phases: no fault, node black-holed, node refusing
// connections. It returns a row per set-up; node is healthy again after.
func runPartitionSetups(t testing.TB, cluster *kfake.Cluster, faults *BrokerFaults, node, parts int, load partitionLoad, p partitionPhases, setups []partitionSetup) []partitionRow {
	t.Helper()
	var rows []partitionRow
	for i, s := range setups {
		topic := TopicNames("partitions")[0] + string(rune('a'+i))
		db := deadBroker{Faults: faults, Node: node, Dead: PartitionTopic(t, cluster, topic, parts, node)}
		publish := s.Publish(topic)
		runPartitionPhase(load, db, Healthy, 300*time.Millisecond, publish) // metadata, connections
		row := partitionRow{Setup: s.Name}
		for _, ph := range []struct {
			d     time.Duration
			fault BrokerFault
			into  **phaseCounts
		}{{p.NoFault, Healthy, &row.NoFault}, {p.Hung, BlackHole, &row.Hung}, {p.Refused, Refuse, &row.Refused}} {
			if ph.d > 0 {
				*ph.into = runPartitionPhase(load, db, ph.fault, ph.d, publish)
			}
		}
		faults.Set(node, Healthy)
		rows = append(rows, row)
	}
	return rows
}

// printNoFaultRatios writes, per row that ran a no-fault phase, the healthy
// partitions' goodput in each faulted phase as a ratio of that row's own no-fault
// goodput (the same partitions' keys, without the fault). It is printed, not checked:
// phases run one after the other on a shared machine (see checkPartitionRows).
func printNoFaultRatios(w io.Writer, rows []partitionRow) {
	for _, r := range rows {
		if r.NoFault == nil || r.NoFault.Goodput() == 0 {
			continue
		}
		fmt.Fprintf(w, "%s: healthy partitions' goodput against a no-fault run (%.1f/s):", r.Setup, r.NoFault.Goodput())
		for _, ph := range []struct {
			name string
			c    *phaseCounts
		}{{"hung", r.Hung}, {"refusing", r.Refused}} {
			if ph.c != nil {
				fmt.Fprintf(w, " %s %.2fx", ph.name, ph.c.Goodput()/r.NoFault.Goodput())
			}
		}
		fmt.Fprintln(w)
	}
}
