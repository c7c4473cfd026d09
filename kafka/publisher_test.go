package kafka_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var policy = breaker.Policy{FailureThreshold: 2, BreakDuration: time.Hour}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// countingWriter returns a writer to a refused address whose transport counts dials.
func countingWriter(t testing.TB) (*kafkago.Writer, *atomic.Int64) {
	dials := new(atomic.Int64)
	tr := &kafkago.Transport{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &kafkago.Writer{Addr: kafkago.TCP(refusedAddr(t)), Transport: tr, RequiredAcks: kafkago.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond}, dials
}

func newRegistry(t testing.TB) *registry.Registry {
	reg, err := registry.New(registry.Policy{Circuit: policy})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestNewPublisherRefusesBadInput(t *testing.T) {
	reg := newRegistry(t)
	w := &kafkago.Writer{Addr: kafkago.TCP("127.0.0.1:9092"), RequiredAcks: kafkago.RequireOne}
	for _, tc := range []struct {
		w    *kafkago.Writer
		reg  *registry.Registry
		opts []kafka.Option
		want string
	}{
		{nil, reg, nil, "kafka: NewPublisher: nil writer"},
		{&kafkago.Writer{}, reg, nil, "kafka: NewPublisher: the writer has no Addr"},
		{w, nil, nil, "kafka: NewPublisher: nil registry"},
		{w, reg, []kafka.Option{kafka.WithCloseTimeout(0)}, "kafka: WithCloseTimeout(0s)"},
		{w, reg, []kafka.Option{kafka.WithClassifier(nil)}, "kafka: WithClassifier(nil)"},
		{&kafkago.Writer{Addr: w.Addr, RequiredAcks: kafkago.RequireAll, Topic: "a\nb"}, reg, nil, "kafka: NewPublisher: the writer's topic"},
		{&kafkago.Writer{Addr: w.Addr}, reg, nil, "kafka: NewPublisher: the writer's RequiredAcks is RequireNone"},
	} {
		if _, err := kafka.NewPublisher(tc.w, tc.reg, tc.opts...); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}

// An open topic is rejected without the writer dialing; the other topic of the same
// call is written (here: attempted, and refused by the absent broker).
func TestOpenTopicIsRejectedWithoutTouchingTheWriter(t *testing.T) {
	w, dials := countingWriter(t)
	reg := newRegistry(t)
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())
	c, _ := reg.Circuit(transport.Destination{Broker: kafka.Broker, Name: "open"})
	c.(*breaker.Breaker).ForceOpen(time.Now().Add(time.Hour))

	err = pub.WriteMessages(context.Background(), kafkago.Message{Topic: "open", Value: []byte("x")})
	var te *kafka.TopicsError
	if !errors.As(err, &te) || !errors.Is(err, breaker.ErrOpen) || len(te.Topics) != 1 || te.Topics[0].Topic != "open" {
		t.Fatalf("open topic: %v", err)
	}
	if n := dials.Load(); n != 0 || w.Stats().Writes != 0 {
		t.Fatalf("the writer dialed %d times for a rejected topic", n)
	}

	err = pub.WriteMessages(context.Background(),
		kafkago.Message{Topic: "open", Value: []byte("a")},
		kafkago.Message{Topic: "other", Value: []byte("b")},
		kafkago.Message{Topic: "open", Value: []byte("c")})
	if !errors.As(err, &te) || len(te.Topics) != 2 {
		t.Fatalf("two topics: %v", err)
	}
	open, other := te.Topics[0], te.Topics[1]
	if open.Topic != "open" || !errors.Is(open.Err, breaker.ErrOpen) || len(open.Indexes) != 2 || open.Indexes[0] != 0 || open.Indexes[1] != 2 {
		t.Fatalf("open topic: %+v", open)
	}
	var op *net.OpError
	if other.Topic != "other" || errors.Is(other.Err, breaker.ErrOpen) || !errors.As(other.Err, &op) || len(other.Indexes) != 1 || other.Indexes[0] != 1 {
		t.Fatalf("other topic: %+v", other)
	}
	if kafka.Classify(other.Err) != breaker.Failure || dials.Load() == 0 {
		t.Fatalf("the other topic was not attempted: %v", other.Err)
	}
}

func TestPublishChecksTheDestination(t *testing.T) {
	w, dials := countingWriter(t)
	pub, _ := kafka.NewPublisher(w, newRegistry(t))
	ctx := context.Background()
	if err := pub.Publish(ctx, transport.Destination{Broker: "sqs", Name: "q"}); !errors.Is(err, kafka.ErrNotKafka) || !strings.HasPrefix(err.Error(), "kafka: ") {
		t.Fatalf("sqs destination: %v", err)
	}
	if err := pub.Publish(ctx, transport.Destination{Broker: kafka.Broker, Name: ""}, transport.Message{}); !errors.Is(err, transport.ErrInvalidDestination) {
		t.Fatalf("empty topic: %v", err)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, transport.Destination{Broker: kafka.Broker, Name: "orders"}); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if dials.Load() != 0 {
		t.Fatal("a refused call reached the writer")
	}
}

// An empty publish to an asynchronous writer used to take a permit that no Completion
// would ever give back: with MaxInFlight 1 the topic was blocked for good.
func TestEmptyPublishTakesNoPermit(t *testing.T) {
	w, _ := countingWriter(t)
	w.Async = true
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Hour, MaxInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer pub.Close(ctx)
	orders := transport.Destination{Broker: kafka.Broker, Name: "orders"}
	if err := pub.Publish(ctx, orders); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("empty Publish: %v", err)
	}
	if err := pub.WriteMessages(ctx); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("empty WriteMessages: %v", err)
	}
	if s := reg.Snapshots()[orders]; s.InFlight != 0 {
		t.Fatalf("an empty publish holds %d permit(s)", s.InFlight)
	}
	// The broker is refused, but the circuit must still let the call through.
	if err := pub.Publish(ctx, orders, transport.Message{Value: []byte("x")}); errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a real publish after the empty ones: %v", err)
	}
}

// A write the asynchronous writer refuses at once is classified on the caller's
// goroutine; a Classifier that panics there must not keep the call's permit.
func TestAsyncClassifierPanicGivesThePermitBack(t *testing.T) {
	w, _ := countingWriter(t) // nothing listens: the writer fails before queueing
	w.Async = true
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Hour, MaxInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(w, reg, kafka.WithClassifier(func(error) breaker.Outcome { panic("classifier bug") }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer pub.Close(ctx)
	orders := transport.Destination{Broker: kafka.Broker, Name: "orders"}
	func() {
		defer func() {
			if recover() != "classifier bug" {
				t.Fatal("the write did not reach the classifier, or its panic was changed")
			}
		}()
		pub.Publish(ctx, orders, transport.Message{Value: []byte("x")})
	}()
	if s := reg.Snapshots()[orders]; s.InFlight != 0 {
		t.Fatalf("a classifier panic left %d permit(s) held", s.InFlight)
	}
}
