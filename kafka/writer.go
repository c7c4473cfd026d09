package kafka

import (
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// NewWriter returns a synchronous kafka-go Writer for brokers with the settings this
// package recommends for a guarded request path (see "Writer settings" in the package
// documentation): every replica acknowledges (RequireAll), so the broker's errors
// reach the circuit; a batch waits at most 5ms (BatchTimeout) instead of kafka-go's
// 1s; kafka-go tries twice (MaxAttempts), the circuit does the rest; writes and reads
// time out after 3s. Messages are spread over partitions by key (Hash), so that one
// key keeps its order. Change fields before giving it to NewPublisher, and none after.
func NewWriter(brokers ...string) *kafkago.Writer {
	return &kafkago.Writer{
		Addr:         kafkago.TCP(brokers...),
		Balancer:     &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll,
		MaxAttempts:  2,
		BatchTimeout: 5 * time.Millisecond,
		WriteTimeout: 3 * time.Second,
		ReadTimeout:  3 * time.Second,
	}
}

// Topic returns the destination of a Kafka topic, "kafka:<topic>".
func Topic(name string) transport.Destination {
	return transport.Destination{Broker: Broker, Name: name}
}

// WithFireAndForget lets NewPublisher take a writer with RequiredAcks RequireNone
// (kafka-go's default), which it refuses otherwise. With RequireNone the broker sends
// no answer, so only connection errors reach the circuit: a broker that takes the
// messages and drops them, or refuses them, never opens it. Use it only where losing
// messages unnoticed is acceptable.
func WithFireAndForget() Option {
	return option.Set(func(p *Publisher) { p.fireAndForget = true })
}

// GuardedBy returns the registry whose circuits guard the publisher, so that
// registry.Guard recognises it as already guarded (see registry.Guarded).
func (p *Publisher) GuardedBy() *registry.Registry { return p.reg }

var _ registry.Guarded = (*Publisher)(nil)
