package kafka_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/surfaces"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A topic written with one key, its broker gone: by the first refusal the topic's
// circuit is open for every surface on-call reads. The admin JSON says open with the
// broker's error and lists the key's partition as isolated, the observers were told
// the partition's isolation and the circuit's opening, the metrics count both, and
// the refusal names a circuit the admin API shows. No time passes on the registry's
// clock between the broker going and the first refusal.
func TestOneKeyTopicDownIsSeen(t *testing.T) {
	cluster := harness.KFake(t, kfake.NumBrokers(1))
	topic := harness.TopicNames("one-key")[0]
	if err := cluster.CreateTopic(topic, 3, nil); err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(t0)
	s := surfaces.New(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: 30 * time.Second}}, registry.WithClock(clock))
	w := kafka.NewWriter(cluster.ListenAddrs()...)
	w.MaxAttempts = 1
	t.Cleanup(func() { _ = w.Close() })
	pub, err := kafka.NewPublisher(w, s.Registry)
	if err != nil {
		t.Fatal(err)
	}
	d := kafka.Topic(topic)
	ctx := context.Background()
	m := transport.Message{Key: []byte("customer-42"), Value: []byte("v")}
	if err := pub.Publish(ctx, d, m); err != nil {
		t.Fatalf("with the broker up: %v", err)
	}
	cluster.Close()

	var refusal error
	for i := range 20 {
		err := pub.Publish(ctx, d, m)
		if err == nil {
			t.Fatalf("publish %d with the broker gone succeeded", i)
		}
		if errors.Is(err, breaker.ErrOpen) {
			refusal = err
			break
		}
	}
	if refusal == nil {
		t.Fatal("20 publishes with the broker gone, none refused")
	}

	code, c := s.Circuit(d.String())
	if code != 200 || c.State != "open" || c.LastError == "" || len(c.IsolatedPartitions) != 1 {
		t.Fatalf("admin: %d %+v; want open with the broker's error and one isolated partition", code, c)
	}
	part := c.IsolatedPartitions[0].Partition
	if c.IsolatedPartitions[0].LastError == "" {
		t.Errorf("isolated partition %+v has no last error", c.IsolatedPartitions[0])
	}
	wantSeen := []string{
		d.String() + "/" + strconv.Itoa(part) + " closed->open " + registry.ReasonPartitionIsolated,
		d.String() + " closed->open " + breaker.ReasonFailureThreshold,
	}
	if got := s.Observed(); !slices.Equal(got, wantSeen) {
		t.Errorf("observed %q, want %q", got, wantSeen)
	}
	if n, _ := s.Metric("brokerguard.circuit.partitions.isolations", topic); n != 1 {
		t.Errorf("partition isolations metric %d, want 1", n)
	}
	if n, _ := s.Metric("brokerguard.circuit.state", topic, "brokerguard.circuit.state=open"); n != 1 {
		t.Errorf("circuit state metric open = %d, want 1", n)
	}
	oe, ok := errors.AsType[*breaker.OpenError](refusal)
	if !ok {
		t.Fatalf("refusal %v has no OpenError", refusal)
	}
	if code, _ := s.Circuit(oe.Identity); code != 200 {
		t.Errorf("the refusal names %q; the admin API answers %d for it", oe.Identity, code)
	}
}
