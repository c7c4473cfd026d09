package saramaguard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
	"github.com/brokerguard/brokerguard/transport"
)

// counting is high enough that no row opens the circuit, and counts permits in
// flight so that a permit never completed shows.
var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 100000}

// env is one test's kfake cluster, registry and topics.
type env struct {
	t           testing.TB
	readTimeout time.Duration // Net.ReadTimeout: a hung broker's cost
	cluster     *kfake.Cluster
	topics      []string
	reg         *registry.Registry
}

func newEnv(t testing.TB, policy breaker.Policy, stems ...string) *env {
	t.Helper()
	e := &env{t: t, topics: harness.TopicNames(stems...), readTimeout: time.Second}
	e.cluster = harness.KFake(t, kfake.SeedTopics(1, e.topics...))
	var err error
	if e.reg, err = registry.New(registry.Policy{Circuit: policy}, registry.WithCallCounts(), registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))); err != nil {
		t.Fatal(err)
	}
	return e
}

// config fails fast: no retries, short timeouts (ReadTimeout is e.readTimeout),
// every answer reported.
func (e *env) config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 0
	cfg.Producer.MaxMessageBytes = 64 << 10
	cfg.Net.DialTimeout = time.Second
	cfg.Net.ReadTimeout = e.readTimeout
	cfg.Net.WriteTimeout = 500 * time.Millisecond
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
	return cfg
}

// sync returns a raw sarama SyncProducer and a guarded one over another, so that a
// hung request of one does not hold the other's connection.
func (e *env) sync() (raw sarama.SyncProducer, guarded *saramaguard.SyncProducer) {
	e.t.Helper()
	raw, err := sarama.NewSyncProducer(e.cluster.ListenAddrs(), e.config())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { raw.Close() })
	if guarded, err = saramaguard.NewSyncProducer(e.cluster.ListenAddrs(), e.config(), e.reg); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { guarded.Close() })
	return raw, guarded
}

func (e *env) dest(i int) transport.Destination {
	return transport.Destination{Broker: saramaguard.Broker, Name: e.topics[i]}
}

func (e *env) circuit(i int) breaker.Snapshot {
	c, err := e.reg.Circuit(e.dest(i))
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Snapshot()
}

func (e *env) message(i, n int) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: e.topics[i], Key: sarama.StringEncoder(fmt.Sprint("k", n)), Value: sarama.StringEncoder(fmt.Sprint("v", n))}
}

func msg(i int) transport.Message {
	return transport.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
}
