package wmkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/brokerguard/brokerguard/watermillguard"
	"github.com/brokerguard/brokerguard/watermillguard/wmkafka"
)

type env struct {
	t       testing.TB
	cluster *kfake.Cluster
	topics  []string
	reg     *registry.Registry
	raw     *kafka.Publisher // watermill-kafka, unguarded
	pub     *watermillguard.Publisher
}

// newEnv starts kfake and two watermill-kafka publishers, one raw and one (on
// connections of its own) guarded with wmkafka.Classify.
func newEnv(t testing.TB, policy breaker.Policy, stems ...string) *env {
	t.Helper()
	e := &env{t: t, topics: harness.TopicNames(stems...)}
	e.cluster = harness.KFake(t, kfake.SeedTopics(1, e.topics...))
	var err error
	if e.reg, err = registry.New(registry.Policy{Circuit: policy}, registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))); err != nil {
		t.Fatal(err)
	}
	e.raw = e.publisher()
	if e.pub, err = watermillguard.New(e.publisher(), e.reg, wmkafka.Broker, watermillguard.WithClassifier(wmkafka.Classify)); err != nil {
		t.Fatal(err)
	}
	return e
}

// publisher is a watermill-kafka publisher that fails fast.
func (e *env) publisher() *kafka.Publisher {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Producer.Retry.Max = 0
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.MaxMessageBytes = 64 << 10
	cfg.Net.ReadTimeout = time.Second
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
	p, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: e.cluster.ListenAddrs(), Marshaler: kafka.DefaultMarshaler{}, OverwriteSaramaConfig: cfg,
	}, watermill.NopLogger{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

func (e *env) circuit(i int) breaker.Snapshot {
	c, err := e.reg.Circuit(transport.Destination{Broker: wmkafka.Broker, Name: e.topics[i]})
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Snapshot()
}

var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 1000}

// Each row is produced by the real watermill-kafka publisher against kfake: the raw
// publisher's error must be classified as want, and the guarded publisher's circuit
// must count exactly the Failures.
func TestClassifyRows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		arm   func(e *env)
		is    error
		want  breaker.Outcome
		large bool
	}{
		{"not leader", func(e *env) { kfakeproduce.Answer(e.cluster, int16(sarama.ErrNotLeaderForPartition), false, nil) }, sarama.ErrNotLeaderForPartition, breaker.Failure, false},
		{"request timed out", func(e *env) { kfakeproduce.Answer(e.cluster, int16(sarama.ErrRequestTimedOut), false, nil) }, sarama.ErrRequestTimedOut, breaker.Failure, false},
		{"no leader", func(e *env) { kfakeproduce.Answer(e.cluster, int16(sarama.ErrLeaderNotAvailable), false, nil) }, sarama.ErrLeaderNotAvailable, breaker.Failure, false},
		{"message too large (broker)", func(e *env) { kfakeproduce.Answer(e.cluster, int16(sarama.ErrMessageSizeTooLarge), false, nil) }, sarama.ErrMessageSizeTooLarge, breaker.Rejected, false},
		{"authorization", func(e *env) { kfakeproduce.Answer(e.cluster, int16(sarama.ErrTopicAuthorizationFailed), false, nil) }, sarama.ErrTopicAuthorizationFailed, breaker.Unusable, false},
		{"message too large (client)", func(*env) {}, nil, breaker.Neutral, true},
		{"hung broker, sarama's read timeout", func(e *env) { kfakeproduce.Hang(e.cluster, false, nil) }, nil, breaker.Failure, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, counting, "orders")
			payload := []byte("x")
			if tc.large {
				payload = make([]byte, 128<<10)
			}
			tc.arm(e)
			raw := e.raw.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), payload))
			if raw == nil || tc.is != nil && !errors.Is(raw, tc.is) {
				t.Fatalf("watermill-kafka returned %v, want %v", raw, tc.is)
			}
			if got := wmkafka.Classify(raw); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", raw, got, tc.want)
			}
			tc.arm(e)
			err := e.pub.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), payload))
			if err == nil {
				t.Fatal("guarded publish: no error")
			}
			s := e.circuit(0)
			if wantCounted := map[bool]int{true: 1}[tc.want == breaker.Failure]; s.Failures != wantCounted || s.InFlight != 0 {
				t.Errorf("guarded: %d failures (want %d), %d in flight; err %v", s.Failures, wantCounted, s.InFlight, err)
			}
		})
	}
}

// A failing topic's circuit opens and refuses without reaching the broker; another
// topic keeps publishing; a message whose context ended is not published; the
// cluster gone is a Failure.
func TestSplitByTopicAndBrokerGone(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}, "bad", "good")
	answered := kfakeproduce.Answer(e.cluster, int16(sarama.ErrNotLeaderForPartition), true, func(topic string) bool { return topic == e.topics[0] })
	for range 2 {
		if err := e.pub.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), []byte("x"))); !errors.Is(err, sarama.ErrNotLeaderForPartition) {
			t.Fatal(err)
		}
	}
	sent := answered.Load()
	if err := e.pub.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), []byte("x"))); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("open topic: %v", err)
	}
	if answered.Load() != sent {
		t.Errorf("the broker saw %d requests for the open topic", answered.Load()-sent)
	}
	if err := e.pub.Publish(e.topics[1], message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatalf("good topic: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := message.NewMessage(watermill.NewUUID(), []byte("x"))
	m.SetContext(ctx)
	if err := e.pub.Publish(e.topics[1], m); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled message: %v", err)
	}
	e.cluster.Close()
	err := e.pub.Publish(e.topics[1], message.NewMessage(watermill.NewUUID(), []byte("x")))
	if err == nil || wmkafka.Classify(err) != breaker.Failure || e.circuit(1).Failures != 1 {
		t.Errorf("broker gone: %v classified %v, %d failures", err, wmkafka.Classify(err), e.circuit(1).Failures)
	}
}

// An outbox publishes through AsTransport: the messages arrive with their headers,
// and an open circuit refuses them as it refuses Watermill's own calls.
func TestAsTransport(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, "outbox")
	pub := e.pub.AsTransport()
	d := transport.Destination{Broker: wmkafka.Broker, Name: e.topics[0]}
	msgs := []transport.Message{
		{Key: []byte("k1"), Value: []byte("v1"), Headers: []transport.Header{{Key: "trace", Value: []byte("t1")}}},
		{Value: []byte("v2")},
	}
	if err := pub.Publish(context.Background(), d, msgs...); err != nil {
		t.Fatal(err)
	}
	recs := harness.ReadTopic(t, e.cluster.ListenAddrs(), e.topics[0], 2)
	if string(recs[0].Value) != "v1" || string(recs[1].Value) != "v2" {
		t.Fatalf("read %q, %q", recs[0].Value, recs[1].Value)
	}
	headers := map[string]string{}
	for _, h := range recs[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	if headers["trace"] != "t1" || headers[watermillguard.KeyMetadata] != "k1" {
		t.Errorf("headers %v", headers)
	}

	if err := pub.Publish(context.Background(), transport.Destination{Broker: "amqp", Name: e.topics[0]}, msgs...); !errors.Is(err, watermillguard.ErrWrongBroker) {
		t.Errorf("wrong broker: %v", err)
	}
	kfakeproduce.Answer(e.cluster, int16(sarama.ErrNotLeaderForPartition), true, nil)
	if err := pub.Publish(context.Background(), d, msgs[1]); !errors.Is(err, sarama.ErrNotLeaderForPartition) {
		t.Fatalf("failing broker: %v", err)
	}
	if err := pub.Publish(context.Background(), d, msgs[1]); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("open circuit: %v", err)
	}
}
