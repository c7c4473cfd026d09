package wmkafka_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/interleave"
)

// BenchmarkPublish compares the guarded watermill-kafka publisher with a raw one
// (each its own sarama producer), one message per call to one kfake broker,
// alternating in one loop.
func BenchmarkPublish(b *testing.B) {
	e := newEnv(b, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, "bench")
	payload := make([]byte, 256)
	interleave.Sub(b, "interleaved", e.cluster.ApplyRetention,
		func() error { return e.raw.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), payload)) },
		func() error { return e.pub.Publish(e.topics[0], message.NewMessage(watermill.NewUUID(), payload)) })
}
