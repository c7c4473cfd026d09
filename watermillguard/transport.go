package watermillguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/brokerguard/brokerguard/transport"
)

// KeyMetadata is the metadata entry under which AsTransport puts a message's key, for a
// Watermill marshaler that partitions or routes by it (watermill-kafka's
// NewWithPartitioningMarshaler, say).
const KeyMetadata = "brokerguard_key"

// ErrWrongBroker is matched by the error of a publish, through AsTransport, to a
// destination of another broker than the Publisher's.
var ErrWrongBroker = errors.New("watermillguard: destination of another broker")

// AsTransport returns p as a transport.Publisher, so that an outbox (or anything
// written against that interface) publishes through Watermill under the same
// circuits. Each transport.Message becomes a Watermill message with a new UUID, the
// publish's context, the headers as metadata (the last of duplicate keys wins:
// Watermill's metadata is a map of strings) and the key, when set, under
// KeyMetadata. The destination's broker must be p's; its name is the topic.
func (p *Publisher) AsTransport() transport.Publisher { return transportPublisher{p} }

type transportPublisher struct{ p *Publisher }

func (t transportPublisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if d.Broker != t.p.broker {
		return fmt.Errorf("%w: %s, but the publisher's broker is %q", ErrWrongBroker, d, t.p.broker)
	}
	wms := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		wm := message.NewMessage(watermill.NewUUID(), m.Value)
		wm.SetContext(ctx)
		for _, h := range m.Headers {
			wm.Metadata.Set(h.Key, string(h.Value))
		}
		if m.Key != nil {
			wm.Metadata.Set(KeyMetadata, string(m.Key))
		}
		wms[i] = wm
	}
	return t.p.Publish(d.Name, wms...)
}
