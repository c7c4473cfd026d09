package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A publisher guarded per exchange: "amqp:orders" and "amqp:amq.default" each get a
// circuit, and the manager's connection circuit protects the dials they share.
func ExampleNewPublisher() {
	m, err := amqp.NewManager("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close() // stops the manager's watcher goroutine and closes the connection

	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	guarded, err := amqp.NewPublisher(m, reg, amqp.WithConfirmTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer guarded.Close()

	ctx := context.Background()
	msg := transport.Message{
		Key:     []byte("order.created"), // the routing key
		Value:   []byte(`{"id":42}`),
		Headers: []transport.Header{{Key: "trace-id", Value: []byte("abc123")}},
	}
	err = guarded.Publish(ctx, amqp.Destination("orders"), msg)
	switch {
	case err == nil:
		fmt.Println("confirmed")
	case errors.Is(err, breaker.ErrOpen):
		fmt.Println("rejected without touching the broker:", err)
	case errors.Is(err, amqp.ErrExchangeNotFound):
		fmt.Println("declare the exchange first:", err)
	default:
		fmt.Println("not confirmed:", err)
	}
	// The default exchange routes to the queue named by the key.
	_ = guarded.Publish(ctx, amqp.Destination(""), transport.Message{Key: []byte("audit-queue"), Value: []byte("hello")})
}

func ExampleClassify() {
	fmt.Println(amqp.Classify(&amqp.ConfirmError{Exchange: "orders"}))
	fmt.Println(amqp.Classify(amqp091.ErrClosed))
	fmt.Println(amqp.Classify(&amqp.ChannelError{Exchange: "orders", Err: &amqp091.Error{Code: amqp091.NotFound}}))
	fmt.Println(amqp.Classify(context.Canceled))
	// Output:
	// failure
	// failure
	// unusable
	// neutral
}

func ExampleDestination() {
	fmt.Println(amqp.Destination("orders"))
	fmt.Println(amqp.Destination(""))
	fmt.Printf("%q\n", amqp.Exchange(amqp.Destination("")))
	// Output:
	// amqp:orders
	// amqp:amq.default
	// ""
}

// Consumers share the manager's connection and open channels of their own.
func ExampleManager_Connection() {
	m, err := amqp.NewManager("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	conn, err := m.Connection(context.Background())
	if err != nil {
		log.Fatal(err) // a *amqp.DialError; errors.Is(err, breaker.ErrOpen) when the broker is known down
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	deliveries, err := ch.Consume("audit-queue", "", false, false, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	for d := range deliveries {
		fmt.Println(string(d.Body))
		_ = d.Ack(false)
	}
}
