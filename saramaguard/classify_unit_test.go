package saramaguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
	"github.com/brokerguard/brokerguard/transport"
)

// How Classify looks through sarama's containers and wrapping; the integration tests
// produce each error itself with the real producers.
func TestClassifyShapes(t *testing.T) {
	d := transport.Destination{Broker: saramaguard.Broker, Name: "orders"}
	perrs := func(errs ...error) sarama.ProducerErrors {
		var out sarama.ProducerErrors
		for _, err := range errs {
			out = append(out, &sarama.ProducerError{Msg: &sarama.ProducerMessage{Topic: "orders"}, Err: err})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"producer error", &sarama.ProducerError{Msg: &sarama.ProducerMessage{}, Err: sarama.ErrNotLeaderForPartition}, breaker.Failure},
		{"producer errors, one failure", perrs(sarama.ErrMessageSizeTooLarge, sarama.ErrOutOfBrokers), breaker.Failure},
		{"producer errors, one rejected", perrs(sarama.ErrMessageSizeTooLarge, sarama.ErrShuttingDown), breaker.Rejected},
		{"producer errors, neutral", perrs(sarama.ErrShuttingDown, sarama.ErrShuttingDown), breaker.Neutral},
		{"send error", &saramaguard.SendError{Failed: []transport.MessageError{{Index: 1, Err: sarama.ErrRequestTimedOut}}}, breaker.Failure},
		{"wrapped as watermill-kafka wraps", fmt.Errorf("cannot produce message 1: %w", sarama.ErrLeaderNotAvailable), breaker.Failure},
		{"configuration", sarama.ConfigurationError("too large"), breaker.Neutral},
		{"closed", saramaguard.ErrClosed, breaker.Neutral},
		{"caller", context.DeadlineExceeded, breaker.Neutral},
		{"rejected", &registry.RejectedError{Destination: d, Err: breaker.ErrOpen}, breaker.Neutral},
		{"unknown", errors.New("boom"), breaker.Neutral},
	} {
		if got := saramaguard.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestSendErrorMessage(t *testing.T) {
	err := &saramaguard.SendError{Failed: []transport.MessageError{{Index: 0, Err: breaker.ErrOpen}, {Index: 3, Err: sarama.ErrRequestTimedOut}}}
	want := "saramaguard: 2 message(s) not sent; [0] breaker: circuit open; [3] " + sarama.ErrRequestTimedOut.Error()
	if err.Error() != want || !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("%q", err.Error())
	}
}
