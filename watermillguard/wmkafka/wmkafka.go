// Package wmkafka classifies the errors of Watermill's Kafka publisher
// (github.com/ThreeDotsLabs/watermill-kafka), for a watermillguard.Publisher.
package wmkafka

import (
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/saramaguard"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of watermill-kafka's destinations: "kafka", shared with the
// other Kafka adapters.
const Broker = "kafka"

// Classify judges an error of watermill-kafka's Publisher. That publisher sends
// through a sarama SyncProducer and wraps sarama's errors (github.com/pkg/errors,
// which unwraps), so the verdict is saramaguard.Classify's: Kafka codes as the
// kafka package judges them, sarama's connection errors as Failures. Its own errors
// ("publisher closed", a marshaling error) are Neutral.
func Classify(err error) breaker.Outcome { return saramaguard.Classify(err) }

var _ transport.Classifier = Classify
