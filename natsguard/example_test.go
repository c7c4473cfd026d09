package natsguard_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A JetStream publisher guarded per stream and per connection: the message's Key is
// its subject, which must be one of the stream's; a refusal names the circuit that
// refused, the stream's or the connection's.
func ExampleNewPublisher() {
	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.Name("orders-service"), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	reg, err := registry.New(registry.DefaultPolicy())
	if err != nil {
		log.Fatal(err)
	}
	pub, err := natsguard.NewPublisher(js, reg) // circuits "nats:ORDERS", "nats-connection:orders-service"
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = pub.Publish(ctx, natsguard.Stream("ORDERS"), transport.Message{Key: []byte("orders.eu.created"), Value: []byte(`{"id":1}`)})
	var refused *registry.RejectedError
	if errors.As(err, &refused) {
		log.Printf("%s refuses publishes until %v", refused.Destination, notBefore(err))
	}

	// Asynchronously: the promise runs once the ack (or the error) comes.
	err = pub.PublishAsync(context.Background(), natsguard.Stream("ORDERS"),
		transport.Message{Key: []byte("orders.eu.paid"), Value: []byte(`{"id":1}`)},
		func(ack *jetstream.PubAck, err error) {
			if err != nil {
				log.Print(err)
				return
			}
			log.Printf("stored as %s #%d", ack.Stream, ack.Sequence)
		})
	if err != nil {
		log.Print(err) // not sent: refused, or too many acks pending
	}
}

func notBefore(err error) time.Time {
	var open *breaker.OpenError
	if errors.As(err, &open) {
		return open.NotBefore
	}
	return time.Time{}
}
