package saramaguard_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/saramaguard"
)

// TestNewSyncProducerInstallsThePartitioner: NewSyncProducer makes sarama's producer
// with saramaguard's partitioner around the config's own (here sarama's manual one,
// which keeps a message's Partition), and leaves the caller's config as it was.
func TestNewSyncProducerInstallsThePartitioner(t *testing.T) {
	e := newEnv(t, counting, "orders")
	cfg := e.config()
	cfg.Producer.Return.Successes = false
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := saramaguard.NewSyncProducer(e.cluster.ListenAddrs(), cfg, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	m := e.message(0, 1)
	if part, _, err := p.SendMessage(context.Background(), m); err != nil || part != 0 {
		t.Fatalf("send through the manual partitioner: partition %d, %v", part, err)
	}
	if cfg.Producer.Return.Successes ||
		reflect.ValueOf(cfg.Producer.Partitioner).Pointer() != reflect.ValueOf(sarama.NewManualPartitioner).Pointer() {
		t.Errorf("the caller's config was changed: Return.Successes %v", cfg.Producer.Return.Successes)
	}
	if ps, _ := e.reg.Partitions(e.dest(0)); ps == nil || ps.Count() != 1 {
		t.Errorf("the registry's partitions of %s were not told the topic's partition count: %+v", e.topics[0], ps)
	}
}
