package kgoguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A broker of three refuses connections until its partition is isolated, then comes
// back: with the README's policy (30 s breaks) the partition's keyed records go out
// again within a few seconds of the registry's clock, its probes coming every
// registry.MaxDefaultPartitionIsolation, not after a 30 s break.
func TestKeyedRecordsComeBackWithTheirBroker(t *testing.T) {
	faults := &harness.BrokerFaults{}
	cluster := harness.KFake(t, kfake.NumBrokers(3), faults.Opt())
	topic := harness.TopicNames("return")[0]
	const parts, node = 3, 1
	dead := harness.PartitionTopic(t, cluster, topic, parts, node)
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg, err := registry.New(registry.Policy{Circuit: readmePolicy}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := kgoguard.New(newClient(t, cluster, kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil))), reg)
	if err != nil {
		t.Fatal(err)
	}
	var healthyKey, deadKey []byte
	for _, k := range harness.Keys(600) {
		part := kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: k}, parts)
		if dead[part] && deadKey == nil {
			deadKey = k
		} else if !dead[part] && healthyKey == nil {
			healthyKey = k
		}
	}
	d := transport.Destination{Broker: kgoguard.Broker, Name: topic}
	publish := func(key []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return p.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
	}
	for _, k := range [][]byte{healthyKey, deadKey} {
		if err := publish(k); err != nil {
			t.Fatalf("with every broker up: %v", err)
		}
	}

	faults.Set(node, harness.Refuse)
	isolated := false
	for range 20 {
		if err := publish(deadKey); registry.IsPartitionRejection(err) {
			isolated = true
			break
		}
	}
	if !isolated {
		t.Fatal("the dead broker's partition was not isolated in 20 keyed publishes")
	}
	if err := publish(healthyKey); err != nil {
		t.Fatalf("a healthy partition's record: %v", err)
	}

	faults.Set(node, harness.Healthy)
	waited := time.Duration(0)
	for err := publish(deadKey); err != nil; err = publish(deadKey) {
		if !errors.Is(err, breaker.ErrOpen) && !registry.IsPartitionRejection(err) {
			t.Logf("probe failed: %v", err) // the client may take a call to reconnect
		}
		if waited >= 5*registry.MaxDefaultPartitionIsolation {
			t.Fatalf("keyed records still refused %v of the registry's clock after the broker came back: %v", waited, err)
		}
		clock.Advance(registry.MaxDefaultPartitionIsolation)
		waited += registry.MaxDefaultPartitionIsolation
	}
	if iso := reg.IsolatedPartitions(d); iso != nil {
		t.Fatalf("partitions still isolated after a published record: %+v", iso)
	}
	t.Logf("keyed records back after %v of the registry's clock (breaks are %v)", waited, readmePolicy.BreakDuration)
}

// readmePolicy is the README's circuit policy, whose breaks (30 s) an isolated
// partition must not wait out.
var readmePolicy = breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}
