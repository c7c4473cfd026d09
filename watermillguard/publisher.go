// Package watermillguard guards a Watermill publisher (message.Publisher of
// github.com/ThreeDotsLabs/watermill) with one circuit per topic, taken from a
// [registry.Registry] under the destination "<broker>:<topic>".
//
// It is a module of its own (github.com/brokerguard/brokerguard/watermillguard), so
// that only the programs that use Watermill depend on it. The package itself needs
// only Watermill's core; the classifiers for Watermill's Kafka and AMQP pub/subs are
// in the subpackages wmkafka and wmamqp.
//
// Watermill's Publish takes no context: each message carries its own
// (message.Message.Context). The guard takes the first message's context as the
// call's: a message whose context has ended is not published, and a call whose
// context ends while it runs completes as the registry says ([registry.Outcome]).
// Messages of one call normally share their handler's context.
//
// Watermill's publishers stop at the first message that fails, so the messages before
// it were published; the guard judges the call by the error alone.
//
// [Publisher.AsTransport] gives the same guarded publisher the [transport.Publisher]
// interface, so an outbox can publish through Watermill.
package watermillguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Option configures a Publisher.
type Option func(*Publisher) error

// WithReturnOnDone makes Publish return the context's error as soon as the first
// message's context ends, instead of waiting for the wrapped publisher, which Watermill
// lets ignore contexts (watermill-kafka does; watermill-amqp waits for a publisher
// confirm without a timeout). The wrapped call then goes on in a goroutine until it
// returns, with the messages; they may still be published. The permit is completed
// when Publish returns, by the registry's rule for an ended context: a deadline that
// left the call its MinCallBudget is a Failure, so a hung broker opens its circuit and
// later calls are refused without starting more such goroutines. A call whose
// context cannot end (no Done channel) runs as without the option.
func WithReturnOnDone() Option {
	return option.Set(func(p *Publisher) { p.returnOnDone = true })
}

// WithClassifier sets the classifier of the wrapped pub/sub's errors: wmkafka.Classify
// for watermill-kafka, wmamqp.Classifier for watermill-amqp. Without one every error
// is a Failure, the registry's default.
func WithClassifier(c transport.Classifier) Option {
	return option.Check(c == nil, "watermillguard: WithClassifier(nil)", func(p *Publisher) { p.classify = c })
}

// Publisher is a message.Publisher that publishes through another under one circuit
// per topic. It is safe for concurrent use when the wrapped publisher is, as
// Watermill requires.
type Publisher struct {
	pub          message.Publisher
	reg          *registry.Registry
	broker       string
	classify     transport.Classifier
	returnOnDone bool
}

var _ message.Publisher = (*Publisher)(nil)

// New returns a Publisher over pub with the circuits of reg; broker names the
// destinations ("kafka", "amqp", ...), so that a topic shares its circuit with the
// other adapters that publish to it (the kafka, kgoguard and saramaguard packages use
// "kafka", the amqp package "amqp").
func New(pub message.Publisher, reg *registry.Registry, broker string, opts ...Option) (*Publisher, error) {
	switch {
	case pub == nil:
		return nil, errors.New("watermillguard: New: nil publisher")
	case reg == nil:
		return nil, errors.New("watermillguard: New: nil registry")
	}
	if err := (transport.Destination{Broker: broker, Name: "x"}).Validate(); err != nil {
		return nil, fmt.Errorf("watermillguard: New: broker %q: %w", broker, err)
	}
	p := &Publisher{pub: pub, reg: reg, broker: broker}
	if err := option.Apply("watermillguard: New", p, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// Decorator returns a message.PublisherDecorator that guards a publisher as New
// does, for Router.AddPublisherDecorators: every handler's publisher of the router
// then publishes under the circuits of reg.
func Decorator(reg *registry.Registry, broker string, opts ...Option) message.PublisherDecorator {
	return func(pub message.Publisher) (message.Publisher, error) {
		return New(pub, reg, broker, opts...)
	}
}

// Publish publishes msgs to topic under the topic's circuit. When the circuit
// refuses, or the first message's context has ended, the wrapped publisher is not
// called and Publish returns a *registry.RejectedError or the context's error.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	ctx := context.Background()
	if len(msgs) > 0 && msgs[0] != nil {
		ctx = msgs[0].Context()
	}
	// The registry refuses a publish of no messages (registry.ErrNoMessages).
	return p.reg.Call(ctx, transport.Destination{Broker: p.broker, Name: topic}, len(msgs), p.classify, func(ctx context.Context) error {
		if !p.returnOnDone || ctx.Done() == nil {
			return p.pub.Publish(topic, msgs...)
		}
		done := make(chan error, 1)
		go func() { done <- p.pub.Publish(topic, msgs...) }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// Close closes the wrapped publisher.
func (p *Publisher) Close() error { return p.pub.Close() }
