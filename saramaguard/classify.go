package saramaguard

import (
	"context"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/transport"
)

// Classify maps an error of sarama, or of this package, to what it says about the
// broker's health; the table is in the package documentation. Kafka error codes are
// judged as the kafka package judges them for kafka-go.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	for err != nil {
		switch e := err.(type) {
		case sarama.KError:
			return kafkacode.Code(int16(e))
		case sarama.ProducerErrors: // no Unwrap: walk the entries
			errs := make([]error, len(e))
			for i, pe := range e {
				errs[i] = pe.Err
			}
			return anyFailure(errs)
		}
		if o, ok := kafkacode.Conn(err); ok {
			return o
		}
		switch err {
		case sarama.ErrOutOfBrokers, sarama.ErrNotConnected, sarama.ErrBrokerNotFound,
			sarama.ErrControllerNotAvailable, sarama.ErrIncompleteResponse:
			return breaker.Failure
		case sarama.ErrShuttingDown, sarama.ErrClosedClient, context.Canceled, context.DeadlineExceeded:
			return breaker.Neutral
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }: // *SendError, *transport.BatchError, errors.Join
			return anyFailure(u.Unwrap())
		default:
			return breaker.Neutral
		}
	}
	return breaker.Neutral
}

var _ transport.Classifier = Classify

// anyFailure is Failure when any of errs is, and Neutral otherwise.
func anyFailure(errs []error) breaker.Outcome { return transport.WorstOf(errs, Classify) }
