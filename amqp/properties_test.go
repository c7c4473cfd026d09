package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/transport"
)

// Property headers become AMQP properties and leave the headers table; other headers,
// and unknown keys of the prefix, stay in it.
func TestPublishingProperties(t *testing.T) {
	m := transport.Message{Value: []byte("{}"), Headers: []transport.Header{
		ContentType("application/json"), MessageID("order-42"), CorrelationID("req-7"),
		Type("order.placed"), AppID("orders"), Expiration(1500 * time.Microsecond),
		{Key: "tenant", Value: []byte("acme")}, {Key: PropertyPrefix + "unknown", Value: []byte("x")},
	}}
	p := publishing(m)
	want := amqp091.Publishing{ContentType: "application/json", MessageId: "order-42", CorrelationId: "req-7",
		Type: "order.placed", AppId: "orders", Expiration: "2", DeliveryMode: amqp091.Persistent}
	got := p
	got.Headers, got.Body = nil, nil
	if got.ContentType != want.ContentType || got.MessageId != want.MessageId || got.CorrelationId != want.CorrelationId ||
		got.Type != want.Type || got.AppId != want.AppId || got.Expiration != want.Expiration || got.DeliveryMode != want.DeliveryMode {
		t.Fatalf("properties: %+v\nwant %+v", got, want)
	}
	if len(p.Headers) != 2 || string(p.Headers["tenant"].([]byte)) != "acme" || p.Headers[PropertyPrefix+"unknown"] == nil {
		t.Fatalf("headers table: %v", p.Headers)
	}
	if p := publishing(transport.Message{Headers: []transport.Header{MessageID("x")}}); p.Headers != nil {
		t.Fatalf("a message with only properties has a headers table: %v", p.Headers)
	}
	for d, ms := range map[time.Duration]string{0: "0", -time.Second: "0", time.Minute: "60000", time.Nanosecond: "1"} {
		if got := string(Expiration(d).Value); got != ms {
			t.Errorf("Expiration(%v) = %q, want %q", d, got, ms)
		}
	}
}
