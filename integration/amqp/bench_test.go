package amqp_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkConfirmedPublish publishes one persistent message per operation and waits
// for its confirm, to the same exchange and queue: "raw" with amqp091-go on one
// confirm-mode channel, "guarded" through a registry-guarded amqp.Publisher.
// "interleaved" alternates the two in every operation, so that both see the same load
// on a shared machine, and reports raw-ns/op, guarded-ns/op and their ratio
// raw/guarded: the guarded publisher's throughput relative to the raw one's.
func BenchmarkConfirmedPublish(b *testing.B) {
	url := harness.AMQPURL(b)
	x := declareExchange(b, url, "fanout", false)
	// A bound queue, kept short so that a long run does not fill the broker.
	declareQueue(b, url, x, "", amqp091.Table{"x-max-length": int32(1000)})
	body := []byte("benchmark payload of a typical small event, about a hundred bytes long ...........")

	ctx := context.Background()
	raw := func(b *testing.B) func() {
		ch := admin(b, url)
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		msg := amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent}
		return func() {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, x, "", false, false, msg)
			if err != nil {
				b.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	guarded := func(b *testing.B) func() {
		s := newSetup(b, url, defaultPolicy, nil)
		d, msg := amqp.Destination(x), transport.Message{Value: body}
		publish := func() {
			if err := s.pub.Publish(ctx, d, msg); err != nil {
				b.Fatal(err)
			}
		}
		publish() // dial outside the timing
		return publish
	}
	for _, bm := range []struct {
		name  string
		setup func(*testing.B) func()
	}{{"raw", raw}, {"guarded", guarded}} {
		b.Run(bm.name, func(b *testing.B) {
			publish := bm.setup(b)
			b.ReportAllocs()
			for b.Loop() {
				publish()
			}
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		publishRaw, publishGuarded := raw(b), guarded(b)
		var rawTime, guardedTime time.Duration
		i := 0
		for b.Loop() {
			first, second, firstTime, secondTime := publishRaw, publishGuarded, &rawTime, &guardedTime
			if i%2 == 1 { // alternate the order so neither always runs on a warmer path
				first, second, firstTime, secondTime = second, first, secondTime, firstTime
			}
			t0 := time.Now()
			first()
			t1 := time.Now()
			second()
			*firstTime += t1.Sub(t0)
			*secondTime += time.Since(t1)
			i++
		}
		b.ReportMetric(float64(rawTime.Nanoseconds())/float64(i), "raw-ns/op")
		b.ReportMetric(float64(guardedTime.Nanoseconds())/float64(i), "guarded-ns/op")
		b.ReportMetric(float64(rawTime)/float64(guardedTime), "raw/guarded")
	})
}
