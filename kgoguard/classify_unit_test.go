package kgoguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// How Classify looks through wrapping and batches; the integration tests produce
// each error itself with the real client.
func TestClassifyShapes(t *testing.T) {
	d := transport.Destination{Broker: kgoguard.Broker, Name: "orders"}
	batch := func(errs ...error) error {
		be := &transport.BatchError{Destination: d}
		for i, err := range errs {
			be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: err})
		}
		return be
	}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"code wrapped as franz-go wraps MessageTooLarge", fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), breaker.Rejected},
		{"failure code wrapped", fmt.Errorf("produce: %w", kerr.NotLeaderForPartition), breaker.Failure},
		{"connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), breaker.Failure},
		{"closed client", kgo.ErrClientClosed, breaker.Neutral},
		{"record context", context.Canceled, breaker.Neutral},
		{"batch with one failure", batch(kerr.MessageTooLarge, kerr.LeaderNotAvailable), breaker.Failure},
		{"batch rejected and unusable", batch(kerr.MessageTooLarge, kerr.TopicAuthorizationFailed), breaker.Rejected},
		{"batch unusable", batch(kerr.UnknownTopicOrPartition, kerr.TopicAuthorizationFailed), breaker.Unusable},
		{"joined", errors.Join(errors.New("x"), kgo.ErrRecordTimeout), breaker.Failure},
		{"rejected", &registry.RejectedError{Destination: d, Err: breaker.ErrOpen}, breaker.Neutral},
		{"unknown", errors.New("boom"), breaker.Neutral},
	} {
		if got := kgoguard.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
