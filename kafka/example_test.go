package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

func ExampleClassify() {
	fmt.Println(kafka.Classify(kafkago.WriteErrors{nil, kafkago.LeaderNotAvailable}))
	fmt.Println(kafka.Classify(kafkago.WriteErrors{kafkago.MessageSizeTooLarge}))
	fmt.Println(kafka.Classify(context.Canceled))
	// Output:
	// failure
	// rejected
	// neutral
}

// The writer settings the package recommends for a guarded, synchronous writer.
func ExampleNewPublisher() {
	tr := &kafkago.Transport{DialTimeout: time.Second}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{
		Addr:         kafkago.TCP("127.0.0.1:9092"),
		Transport:    tr,
		RequiredAcks: kafkago.RequireAll, // let the broker's errors reach the circuit
		MaxAttempts:  2,                  // the circuit, not kafka-go, retries
		BatchTimeout: 5 * time.Millisecond,
		WriteTimeout: 3 * time.Second,
		ReadTimeout:  3 * time.Second,
	}
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		panic(err)
	}
	pub, err := kafka.NewPublisher(w, reg, kafka.WithCloseTimeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer pub.Close(context.Background())

	err = pub.WriteMessages(context.Background(),
		kafkago.Message{Topic: "orders", Key: []byte("o-1"), Value: []byte(`{"total":12}`)},
		kafkago.Message{Topic: "audit", Value: []byte("order o-1 placed")})
	var te *kafka.TopicsError
	if errors.As(err, &te) {
		for _, t := range te.Topics {
			fmt.Println(t.Topic, "not written:", errors.Is(t.Err, breaker.ErrOpen), t.Indexes)
		}
	}
}

// A topic whose broker cannot be reached opens its circuit; later calls return at
// once without touching the writer.
func ExamplePublisher_Publish() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), Transport: tr, RequiredAcks: kafkago.RequireAll, MaxAttempts: 1}
	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}})
	pub, _ := kafka.NewPublisher(w, reg)
	defer pub.Close(context.Background())

	orders := transport.Destination{Broker: kafka.Broker, Name: "orders"}
	for range 3 {
		err := pub.Publish(context.Background(), orders, transport.Message{Value: []byte("hello")})
		fmt.Println(kafka.Classify(err), errors.Is(err, breaker.ErrOpen))
	}
	// Output:
	// failure false
	// failure false
	// neutral true
}
