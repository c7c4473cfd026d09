package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	kproduce "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The shapes kafka-go gives its errors, built from its own types; the integration
// tests in integration/kafka produce each row with the real writer.
func TestClassifyTable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	produce := func(err error) error { return fmt.Errorf("kafka.(*Client).Produce: %w", err) }
	dest := transport.Destination{Broker: kafka.Broker, Name: "orders"}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"dial refused, bare", dial, breaker.Failure},
		{"dial refused in WriteErrors", kafkago.WriteErrors{nil, produce(dial)}, breaker.Failure},
		{"unexpected EOF", kafkago.WriteErrors{produce(io.ErrUnexpectedEOF)}, breaker.Failure},
		{"connection reset", produce(syscall.ECONNRESET), breaker.Failure},
		{"dns", &net.DNSError{Err: "no such host", Name: "kafka"}, breaker.Failure},
		{"writer deadline in WriteErrors", kafkago.WriteErrors{context.DeadlineExceeded}, breaker.Failure},
		{"writer deadline in WriteError", &kafka.WriteError{Topic: "orders", Err: context.DeadlineExceeded}, breaker.Failure},
		{"caller deadline", context.DeadlineExceeded, breaker.Neutral},
		{"caller cancel", context.Canceled, breaker.Neutral},
		{"caller cancel wrapped", fmt.Errorf("publish: %w", context.Canceled), breaker.Neutral},
		{"request timed out", kafkago.WriteErrors{kafkago.RequestTimedOut}, breaker.Failure},
		{"leader not available with message", fmt.Errorf("%w: election", kafkago.LeaderNotAvailable), breaker.Failure},
		{"not enough replicas", kafkago.NotEnoughReplicas, breaker.Failure},
		{"throttled", kafkago.ThrottlingQuotaExceeded, breaker.Failure},
		{"unknown server error", kafkago.Unknown, breaker.Failure},
		{"message too large (client)", kafkago.MessageTooLargeError{}, breaker.Rejected},
		{"message too large (broker)", kafkago.WriteErrors{kafkago.MessageSizeTooLarge}, breaker.Rejected},
		{"invalid message", kafkago.InvalidMessage, breaker.Rejected},
		{"unknown topic", kafkago.UnknownTopicOrPartition, breaker.Unusable},
		{"topic authorization", kafkago.TopicAuthorizationFailed, breaker.Unusable},
		{"writer closed", io.ErrClosedPipe, breaker.Neutral},
		{"application error", errors.New("boom"), breaker.Neutral},
		{"publisher closed", kafka.ErrClosed, breaker.Neutral},
		{"rejected", &registry.RejectedError{Destination: dest, Err: breaker.ErrOpen}, breaker.Neutral},
		{"one failure among neutral entries", kafkago.WriteErrors{kafkago.MessageSizeTooLarge, nil, kafkago.LeaderNotAvailable}, breaker.Failure},
		{"only rejected entries", kafkago.WriteErrors{kafkago.MessageSizeTooLarge, nil}, breaker.Rejected},
		{"batch error", &transport.BatchError{Destination: dest, Failed: []transport.MessageError{{Index: 2, Err: &kafka.WriteError{Topic: "orders", Err: kafkago.NotLeaderForPartition}}}}, breaker.Failure},
		{"topics error", &kafka.TopicsError{Topics: []kafka.TopicError{
			{Topic: "a", Err: &registry.RejectedError{Destination: dest, Err: breaker.ErrOpen}},
			{Topic: "b", Err: &kafka.WriteError{Topic: "b", Err: produce(dial)}},
		}}, breaker.Failure},
		{"joined", errors.Join(errors.New("x"), kafkago.BrokerNotAvailable), breaker.Failure},
		// kafka-go's client-side protocol errors, wrapped as its transport wraps them.
		{"partition without a leader", kafkago.WriteErrors{produce(kproduce.NewError(protocol.NewErrNoLeader("orders", 0)))}, breaker.Failure},
		{"topic not in the metadata", kafkago.WriteErrors{produce(kproduce.NewError(protocol.NewErrNoTopic("orders")))}, breaker.Unusable},
		{"partition not in the metadata", kafkago.WriteErrors{produce(kproduce.NewError(protocol.NewErrNoPartition("orders", 3)))}, breaker.Unusable},
		{"empty record set", produce(protocol.ErrNoRecord), breaker.Neutral},
		{"correlation id mismatch", kafkago.WriteErrors{produce(protocol.Errorf("correlation id mismatch (expected=%d, found=%d)", 1, 2))}, breaker.Failure},
	} {
		if got := kafka.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestErrorMessagesNameThePackage(t *testing.T) {
	dest := transport.Destination{Broker: kafka.Broker, Name: "orders"}
	te := &kafka.TopicsError{Topics: []kafka.TopicError{
		{Topic: "orders", Indexes: []int{0, 2}, Err: &registry.RejectedError{Destination: dest, Err: breaker.ErrOpen}},
	}}
	want := "kafka: 1 topic(s) not written; orders (2 message(s)): registry: publish to kafka:orders rejected: breaker: circuit open"
	if te.Error() != want || !errors.Is(te, breaker.ErrOpen) {
		t.Fatalf("%q", te.Error())
	}
	we := &kafka.WriteError{Topic: "orders", Err: kafkago.LeaderNotAvailable}
	if !errors.Is(we, kafkago.LeaderNotAvailable) || we.Error()[:len("kafka: write to orders: ")] != "kafka: write to orders: " {
		t.Fatalf("%q", we.Error())
	}
}
