// Package wmamqp classifies the errors of Watermill's AMQP publisher
// (github.com/ThreeDotsLabs/watermill-amqp), for a watermillguard.Publisher.
//
// Two limits of watermill-amqp v3.0.2: with ConfirmDelivery its Publish waits for the
// confirm without any timeout, so a broker that stops answering holds the call until
// the connection drops (watermillguard.WithReturnOnDone lets the message's deadline
// end the call, and counts it as the registry's deadline rule says); and its
// reconnect writes the connection state that Publish reads without
// synchronization, a data race the race detector reports when a publish meets a
// reconnect.
package wmamqp

import (
	"strings"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of watermill-amqp's destinations: "amqp", shared with the amqp
// package. watermill-amqp names the exchange after the topic with its default
// configurations, so a topic is the amqp package's exchange.
const Broker = "amqp"

// Connection is what the classifier asks the publisher; watermill-amqp's *Publisher
// has both methods.
type Connection interface {
	IsConnected() bool
	Closed() bool
}

// Classifier returns the classifier of the errors of pub, a watermill-amqp publisher.
//
//   - An error while pub is not connected (and not closed) is a Failure: the
//     connection to the broker is down. watermill-amqp says so only in text
//     ("not connected to AMQP"); asking the publisher avoids matching it.
//   - A message the broker did not confirm (a nack, or a channel closed before the
//     confirm) is a Failure. watermill-amqp reports it only as text, "delivery not
//     confirmed for message [...]", which is matched here and nowhere else; the
//     integration test produces a real nack, so a change of that text shows.
//   - Otherwise amqp.Classify judges the amqp091 errors in the chain (watermill-amqp
//     wraps them with github.com/pkg/errors, which unwraps): connection and channel
//     errors are Failures, the rest Neutral; a closed publisher is Neutral.
func Classifier(pub Connection) transport.Classifier {
	return func(err error) breaker.Outcome {
		if err == nil {
			return breaker.Success
		}
		if pub.Closed() {
			return breaker.Neutral
		}
		if !pub.IsConnected() || strings.HasPrefix(err.Error(), notConfirmed) {
			return breaker.Failure
		}
		return amqp.Classify(err)
	}
}

// notConfirmed begins the error watermill-amqp (v3) returns for a nacked message.
const notConfirmed = "delivery not confirmed for message"
