package amqp_test

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/integration/harness"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkConfirmedPublish publishes one persistent message per operation and waits
// for its confirm, to the same exchange and queue: "raw" with amqp091-go on one
// confirm-mode channel, "guarded" through a registry-guarded amqp.Publisher. The ratio
// raw ns/op / guarded ns/op is the guarded publisher's relative throughput.
func BenchmarkConfirmedPublish(b *testing.B) {
	url := harness.AMQPURL(b)
	x := declareExchange(b, url, "fanout", false)
	// A bound queue, kept short so that a long run does not fill the broker.
	declareQueue(b, url, x, "", amqp091.Table{"x-max-length": int32(1000)})
	body := []byte("benchmark payload of a typical small event, about a hundred bytes long ...........")

	b.Run("raw", func(b *testing.B) {
		ch := admin(b, url)
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		msg := amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent}
		b.ReportAllocs()
		for b.Loop() {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, x, "", false, false, msg)
			if err != nil {
				b.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	})
	b.Run("guarded", func(b *testing.B) {
		s := newSetup(b, url, defaultPolicy, nil)
		ctx := context.Background()
		d, msg := amqp.Destination(x), transport.Message{Value: body}
		if err := s.pub.Publish(ctx, d, msg); err != nil { // dial outside the timing
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.pub.Publish(ctx, d, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
