package amqp

import (
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/transport"
)

// PropertyPrefix starts the keys of the message headers that the Publisher sends as
// AMQP message properties instead of entries of the headers table. Being headers, the
// properties travel through the outbox with the message. Make them with ContentType,
// MessageID, CorrelationID, Type, AppID and Expiration.
const PropertyPrefix = "amqp."

// The header keys of the properties the Publisher sets.
const (
	propContentType   = PropertyPrefix + "content-type"
	propMessageID     = PropertyPrefix + "message-id"
	propCorrelationID = PropertyPrefix + "correlation-id"
	propType          = PropertyPrefix + "type"
	propAppID         = PropertyPrefix + "app-id"
	propExpiration    = PropertyPrefix + "expiration"
)

func property(key, value string) transport.Header {
	return transport.Header{Key: key, Value: []byte(value)}
}

// ContentType returns the header that sets the message's content-type property
// ("application/json").
func ContentType(v string) transport.Header { return property(propContentType, v) }

// MessageID returns the header that sets the message's message-id property.
func MessageID(v string) transport.Header { return property(propMessageID, v) }

// CorrelationID returns the header that sets the message's correlation-id property.
func CorrelationID(v string) transport.Header { return property(propCorrelationID, v) }

// Type returns the header that sets the message's type property.
func Type(v string) transport.Header { return property(propType, v) }

// AppID returns the header that sets the message's app-id property.
func AppID(v string) transport.Header { return property(propAppID, v) }

// Expiration returns the header that sets the message's expiration property: the
// broker drops the message once it has waited d in a queue. AMQP counts it in whole
// milliseconds; d is rounded up to one, and a negative d counts as 0 (expire at once
// unless a consumer is waiting).
func Expiration(d time.Duration) transport.Header {
	ms := (max(d, 0) + time.Millisecond - 1) / time.Millisecond
	return property(propExpiration, strconv.FormatInt(int64(ms), 10))
}

// withProperties returns pub with the properties m's headers set; the headers
// table gets the other headers.
func withProperties(pub amqp091.Publishing, m transport.Message) amqp091.Publishing {
	pub.Headers = nil
	for _, h := range m.Headers {
		if !strings.HasPrefix(h.Key, PropertyPrefix) {
			if pub.Headers == nil {
				pub.Headers = make(amqp091.Table, len(m.Headers))
			}
			pub.Headers[h.Key] = h.Value
			continue
		}
		v := string(h.Value)
		switch h.Key {
		case propContentType:
			pub.ContentType = v
		case propMessageID:
			pub.MessageId = v
		case propCorrelationID:
			pub.CorrelationId = v
		case propType:
			pub.Type = v
		case propAppID:
			pub.AppId = v
		case propExpiration:
			pub.Expiration = v
		default: // a key of this prefix the Publisher does not know: an ordinary header
			if pub.Headers == nil {
				pub.Headers = make(amqp091.Table, len(m.Headers))
			}
			pub.Headers[h.Key] = h.Value
		}
	}
	return pub
}
