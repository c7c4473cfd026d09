package kgoguard

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/transport"
)

// Classify maps an error of franz-go, or of a Producer, to what it says about the
// broker's health; the table is in the package documentation. Kafka error codes are
// judged as the kafka package judges them for kafka-go.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	for err != nil {
		if e, ok := err.(*kerr.Error); ok {
			return kafkacode.Code(e.Code)
		}
		if o, ok := kafkacode.Conn(err); ok {
			return o
		}
		switch err {
		case kgo.ErrRecordTimeout, kgo.ErrRecordRetries:
			// The client's own delivery timeout or retry limit: the broker had its
			// chances and did not take the record.
			return breaker.Failure
		case kgo.ErrClientClosed, kgo.ErrAborting, kgo.ErrMaxBuffered, context.Canceled, context.DeadlineExceeded:
			// The application closed or aborted, its buffer is full, or a record's
			// context ended: none of it is the broker's verdict.
			return breaker.Neutral
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }: // *transport.BatchError, errors.Join
			return transport.WorstOf(u.Unwrap(), Classify)
		default:
			return breaker.Neutral
		}
	}
	return breaker.Neutral
}

var _ transport.Classifier = Classify
