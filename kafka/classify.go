package kafka

import (
	"context"
	"errors"
	"io"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/transport"
)

// WriteError is the writer's failure to write messages to Topic: an entry of a
// kafka.WriteErrors, a synchronous error of WriteMessages other than the caller's
// context, or the error an asynchronous writer reported. A deadline inside it is the
// writer's own WriteTimeout, which Classify counts as a Failure.
type WriteError struct {
	Topic string
	Err   error
}

// Error names the topic and the writer's error.
func (e *WriteError) Error() string { return "kafka: write to " + e.Topic + ": " + e.Err.Error() }

// Unwrap returns the writer's error.
func (e *WriteError) Unwrap() error { return e.Err }

// Classify maps an error of kafka-go, or of a Publisher, to what it says about the
// broker's health; the table is in the package documentation. A Publisher's circuits
// apply the registry's deadline rule (registry.Outcome) before Classify: the caller's
// cancellation is Neutral, and the caller's deadline a Failure only for a call that
// started with the policy's MinCallBudget.
func Classify(err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	return classify(err, false)
}

var _ transport.Classifier = Classify

// classify walks err's chain; inWriter says the error came out of the writer's own
// attempt rather than from the caller's context.
func classify(err error, inWriter bool) breaker.Outcome {
	for err != nil {
		switch e := err.(type) {
		case kafkago.WriteErrors: // no Unwrap: walk the entries
			return anyFailure(e, true)
		case *WriteError:
			err, inWriter = e.Err, true
			continue
		case kafkago.Error:
			return kafkacode.Code(int16(e))
		case kafkago.MessageTooLargeError: // over the writer's BatchBytes: the message's own
			return breaker.Rejected
		case protocol.Error: // a plain string with no Unwrap
			return protocolOutcome(e)
		}
		if o, ok := kafkacode.Conn(err); ok {
			return o
		}
		switch err {
		case context.Canceled:
			return breaker.Neutral
		case context.DeadlineExceeded:
			if inWriter {
				return breaker.Failure
			}
			return breaker.Neutral
		case io.ErrClosedPipe:
			return breaker.Neutral
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }: // *transport.BatchError, *TopicsError, errors.Join
			return anyFailure(u.Unwrap(), inWriter)
		default:
			return breaker.Neutral
		}
	}
	return breaker.Neutral
}

// anyFailure is the worst outcome of errs (transport.WorstOf).
func anyFailure(errs []error, inWriter bool) breaker.Outcome {
	return transport.WorstOf(errs, func(e error) breaker.Outcome { return classify(e, inWriter) })
}

// protocolOutcome is the table of kafka-go's client-side protocol errors. A partition
// without a leader is the broker side's unavailability. A topic or partition missing
// from the metadata makes the topic Unusable; an empty record set or a reset is about
// the request. Any other value comes from protocol.Errorf while reading the broker's
// answer (a correlation id mismatch, a bad checksum): the connection's byte stream
// cannot be trusted, a Failure.
func protocolOutcome(e protocol.Error) breaker.Outcome {
	switch e {
	case protocol.ErrNoLeader:
		return breaker.Failure
	case protocol.ErrNoTopic, protocol.ErrNoPartition:
		return breaker.Unusable
	case protocol.ErrNoRecord, protocol.ErrNoReset:
		return breaker.Neutral
	}
	return breaker.Failure
}

// isContextErr reports whether err is the bare error of an ended context.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
