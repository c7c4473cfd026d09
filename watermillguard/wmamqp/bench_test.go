package wmamqp_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/interleave"
)

// BenchmarkConfirmedPublish compares the guarded watermill-amqp publisher with a raw
// one (each its own connection), one confirmed message per call to the machine's
// RabbitMQ, alternating in one loop. The topic's exchange has no queue, so nothing
// piles up on the shared broker.
func BenchmarkConfirmedPublish(b *testing.B) {
	amqpURL := harness.AMQPURL(b)
	reg := newRegistry(b, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute})
	raw, _ := guarded(b, amqpURL, reg)
	_, p := guarded(b, amqpURL, reg)
	topic := unique("bench")
	cleanup(b, amqpURL, []string{topic}, nil)
	payload := make([]byte, 256)
	runtime.GC()
	b.ReportAllocs()
	interleave.Run(b,
		func() error { return raw.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)) },
		func() error { return p.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)) })
}
