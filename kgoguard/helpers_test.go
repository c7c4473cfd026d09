package kgoguard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// counting is high enough that no row opens the circuit, and counts permits in
// flight so that a permit never completed shows.
var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 100000}

// env is one test's kfake cluster, franz-go client and guarded producer.
type env struct {
	t       testing.TB
	cluster *kfake.Cluster
	topics  []string
	cl      *kgo.Client
	reg     *registry.Registry
	p       *kgoguard.Producer
}

// newEnv starts kfake with the topics seeded, a client (see newClient) with opts
// and a guarded producer over it.
func newEnv(t testing.TB, policy breaker.Policy, stems []string, opts ...kgo.Opt) *env {
	t.Helper()
	e := &env{t: t, topics: harness.TopicNames(stems...)}
	e.cluster = harness.KFake(t, kfake.SeedTopics(1, e.topics...))
	var err error
	if e.reg, err = registry.New(registry.Policy{Circuit: policy}, registry.WithCallCounts(), registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))); err != nil {
		t.Fatal(err)
	}
	e.cl = e.client(opts...)
	for _, topic := range e.topics { // learn the metadata before any fault
		if err := e.cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic}).FirstErr(); err != nil {
			t.Fatalf("warm-up produce to %s: %v", topic, err)
		}
	}
	if e.p, err = kgoguard.New(e.cl, e.reg); err != nil {
		t.Fatal(err)
	}
	return e
}

// client returns a client of the cluster (see newClient) with opts and the
// partitioner of e's registry, as kgoguard.New requires.
func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	return newClient(e.t, e.cluster, append(opts, kgo.RecordPartitioner(kgoguard.Partitioner(e.reg, nil)))...)
}

func (e *env) dest(i int) transport.Destination {
	return transport.Destination{Broker: kgoguard.Broker, Name: e.topics[i]}
}

func (e *env) circuit(i int) breaker.Snapshot {
	c, err := e.reg.Circuit(e.dest(i))
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Snapshot()
}

func (e *env) record(i, n int) *kgo.Record {
	return &kgo.Record{Topic: e.topics[i], Key: fmt.Appendf(nil, "k%d", n), Value: fmt.Appendf(nil, "v%d", n)}
}

func msg(i int) transport.Message {
	return transport.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
}

// newClient returns a client of cluster that fails fast: no idempotence (so that a
// record whose request is outstanding can still be failed), no retries, no linger.
func newClient(t testing.TB, cluster *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	// Produce v13 names topics by ID only; the fault helpers match topics by name.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.Produce), 12)
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.MaxVersions(versions),
		kgo.DisableIdempotentWrite(),
		kgo.RecordRetries(0),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(5 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
