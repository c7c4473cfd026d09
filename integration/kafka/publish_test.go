package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/transport"
)

var policy = breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}

func TestRoundTripKeepsKeyValueAndHeaders(t *testing.T) {
	e := newEnv(t, policy, nil, "orders")
	sent := []transport.Message{
		{Key: []byte("k1"), Value: []byte("v1"), Headers: []transport.Header{{Key: "trace", Value: []byte("abc")}, {Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")}}},
		{Key: nil, Value: []byte("no key"), Headers: nil},
		{Key: []byte("k3"), Value: []byte{}, Headers: []transport.Header{{Key: "empty", Value: nil}}},
	}
	if err := e.pub.Publish(context.Background(), e.dest(0), sent...); err != nil {
		t.Fatal(err)
	}
	got := harness.ReadTopic(t, e.brokers, e.topics[0], len(sent))
	for i, want := range sent {
		r := got[i]
		if !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) || len(r.Headers) != len(want.Headers) {
			t.Fatalf("record %d: key %q value %q headers %v; sent %+v", i, r.Key, r.Value, r.Headers, want)
		}
		for j, h := range want.Headers {
			if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
				t.Fatalf("record %d header %d: %q=%q, sent %q=%q", i, j, r.Headers[j].Key, r.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
	if s := e.circuit(0); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("circuit after success: %+v", s)
	}
}

func TestWriteMessagesSplitsTopics(t *testing.T) {
	e := newEnv(t, policy, nil, "orders", "refunds")
	msgs := []kafkago.Message{
		{Topic: e.topics[0], Value: []byte("o1")},
		{Topic: e.topics[1], Value: []byte("r1"), WriterData: "kept"},
		{Topic: e.topics[0], Value: []byte("o2")},
	}
	if err := e.pub.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	if msgs[1].WriterData != "kept" || msgs[0].Offset != 0 {
		t.Fatal("WriteMessages modified the caller's messages")
	}
	orders := harness.ReadTopic(t, e.brokers, e.topics[0], 2)
	refunds := harness.ReadTopic(t, e.brokers, e.topics[1], 1)
	if string(orders[0].Value) != "o1" || string(orders[1].Value) != "o2" || string(refunds[0].Value) != "r1" {
		t.Fatalf("orders %q %q, refunds %q", orders[0].Value, orders[1].Value, refunds[0].Value)
	}
}

func TestDestinationsTheWriterCannotTake(t *testing.T) {
	e := newEnv(t, policy, nil, "orders")
	ctx := context.Background()
	if err := e.pub.Publish(ctx, transport.Destination{Broker: "amqp", Name: e.topics[0]}, msg(1)); !errors.Is(err, kafka.ErrNotKafka) {
		t.Fatalf("amqp destination: %v", err)
	}
	if err := e.pub.WriteMessages(ctx, kafkago.Message{Topic: e.topics[0]}, kafkago.Message{Value: []byte("no topic")}); !errors.Is(err, kafka.ErrTopic) {
		t.Fatalf("message without topic: %v", err)
	}
	if len(e.reg.Snapshots()) != 0 {
		t.Fatal("a refused call created a circuit")
	}

	fixed := newEnv(t, policy, func(e *env) { e.w.Topic = e.topics[0] }, "fixed")
	if err := fixed.pub.Publish(ctx, transport.Destination{Broker: kafka.Broker, Name: "other"}, msg(1)); !errors.Is(err, kafka.ErrTopic) {
		t.Fatalf("other topic on a fixed-topic writer: %v", err)
	}
	if err := fixed.pub.WriteMessages(ctx, kafkago.Message{Topic: fixed.topics[0], Value: []byte("x")}); !errors.Is(err, kafka.ErrTopic) {
		t.Fatalf("message naming a topic on a fixed-topic writer: %v", err)
	}
	if err := fixed.pub.Publish(ctx, fixed.dest(0), msg(1)); err != nil {
		t.Fatal(err)
	}
	if err := fixed.pub.WriteMessages(ctx, kafkago.Message{Value: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	got := harness.ReadTopic(t, fixed.brokers, fixed.topics[0], 2)
	if string(got[0].Value) != "v1" || string(got[1].Value) != "v2" {
		t.Fatalf("fixed topic read %q, %q", got[0].Value, got[1].Value)
	}
}

// A topic whose broker answers with errors opens its own circuit; a healthy topic
// written through the same writer, in the same calls, keeps being written.
func TestFailingTopicNeverBlocksAHealthyOne(t *testing.T) {
	e := newEnv(t, policy, nil, "bad", "good")
	e.needKFake()
	bad, good := e.topics[0], e.topics[1]
	answered := answerProduce(e.cluster, int16(kafkago.LeaderNotAvailable), true, func(topic string) bool { return topic == bad })
	counter := countProduce(e.cluster)
	ctx := context.Background()
	const calls = 6
	for i := range calls {
		err := e.pub.WriteMessages(ctx,
			kafkago.Message{Topic: bad, Value: fmt.Appendf(nil, "b%d", i)},
			kafkago.Message{Topic: good, Value: fmt.Appendf(nil, "g%d", i)})
		var te *kafka.TopicsError
		if !errors.As(err, &te) || len(te.Topics) != 1 || te.Topics[0].Topic != bad || len(te.Topics[0].Indexes) != 1 || te.Topics[0].Indexes[0] != 0 {
			t.Fatalf("call %d: %v, want a TopicsError for %s only", i, err, bad)
		}
		wantOpen := i >= policy.FailureThreshold
		if errors.Is(err, breaker.ErrOpen) != wantOpen {
			t.Fatalf("call %d: errors.Is(err, ErrOpen) = %v, want %v: %v", i, !wantOpen, wantOpen, err)
		}
		if !wantOpen && !errors.Is(err, kafkago.LeaderNotAvailable) {
			t.Fatalf("call %d: %v does not carry the broker's error", i, err)
		}
	}
	if s := e.circuit(0); s.State != breaker.Open {
		t.Fatalf("bad topic: %v", s.State)
	}
	if s := e.circuit(1); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("good topic: %+v", s)
	}
	if n := counter.get(good); n < calls {
		t.Fatalf("%d produce requests reached %s, want at least %d", n, good, calls)
	}
	// The writer stopped sending the bad topic's messages once its circuit opened.
	if n := answered.Load(); n != int64(policy.FailureThreshold) || counter.get(bad) != 0 {
		t.Fatalf("%d produce requests for %s, want %d", n+int64(counter.get(bad)), bad, policy.FailureThreshold)
	}
	got := harness.ReadTopic(t, e.brokers, good, calls)
	for i, r := range got {
		if want := fmt.Sprintf("g%d", i); string(r.Value) != want {
			t.Fatalf("good record %d = %q, want %q", i, r.Value, want)
		}
	}
}
