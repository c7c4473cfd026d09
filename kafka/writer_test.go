package kafka_test

import (
	"context"
	"errors"
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// kafka-go's default RequireNone is refused unless asked for; NewWriter's settings
// are accepted as they are.
func TestNewPublisherRequiredAcks(t *testing.T) {
	reg := newRegistry(t)
	if _, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP("127.0.0.1:9092")}, reg); err == nil {
		t.Fatal("a RequireNone writer was accepted")
	}
	pub, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP("127.0.0.1:9092")}, reg, kafka.WithFireAndForget())
	if err != nil {
		t.Fatalf("WithFireAndForget: %v", err)
	}
	pub.Close(context.Background())
	w := kafka.NewWriter("127.0.0.1:9092")
	if w.RequiredAcks != kafkago.RequireAll || w.BatchTimeout <= 0 || w.BatchTimeout > 10e6 || w.MaxAttempts > 3 {
		t.Errorf("NewWriter: acks %v, batch timeout %v, attempts %d", w.RequiredAcks, w.BatchTimeout, w.MaxAttempts)
	}
	pub, err = kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatalf("NewWriter's writer refused: %v", err)
	}
	pub.Close(context.Background())
	if got := kafka.Topic("orders"); got != (transport.Destination{Broker: "kafka", Name: "orders"}) {
		t.Errorf("Topic: %v", got)
	}
}

// Guarding the guarded Publisher again is a no-op: the result is the Publisher
// itself, so one call takes one permit and the circuit recovers after an outage
// (registry's TestGuardTwice shows the wedge this avoids). Another registry is
// refused at construction.
func TestGuardKafkaPublisherAgain(t *testing.T) {
	w, dials := countingWriter(t)
	reg := newRegistry(t)
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())
	if got := reg.Guard(pub, kafka.Classify); got != transport.Publisher(pub) {
		t.Fatalf("Guard wrapped the guarded publisher: %T", got)
	}
	other, err := registry.New(registry.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("another registry's Guard accepted the guarded publisher")
			}
		}()
		other.Guard(pub, kafka.Classify)
	}()
	err = reg.Guard(pub, kafka.Classify).Publish(context.Background(), kafka.Topic("orders"), transport.Message{Value: []byte("x")})
	if err == nil || errors.Is(err, breaker.ErrOpen) || dials.Load() == 0 {
		t.Fatalf("first publish to a refused port: %v after %d dials", err, dials.Load())
	}
}
