package kafkacode

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
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/brokerguard/brokerguard/breaker"
)

// The constants are the protocol's codes, as both clients in this module name them.
func TestCodesMatchTheClients(t *testing.T) {
	for _, tc := range []struct {
		ours  int16
		kgo   *kerr.Error
		kgoer kafkago.Error
	}{
		{UnknownServerError, kerr.UnknownServerError, kafkago.Unknown},
		{RequestTimedOut, kerr.RequestTimedOut, kafkago.RequestTimedOut},
		{LeaderNotAvailable, kerr.LeaderNotAvailable, kafkago.LeaderNotAvailable},
		{NotLeaderForPartition, kerr.NotLeaderForPartition, kafkago.NotLeaderForPartition},
		{BrokerNotAvailable, kerr.BrokerNotAvailable, kafkago.BrokerNotAvailable},
		{ReplicaNotAvailable, kerr.ReplicaNotAvailable, kafkago.ReplicaNotAvailable},
		{NetworkException, kerr.NetworkException, kafkago.NetworkException},
		{NotEnoughReplicas, kerr.NotEnoughReplicas, kafkago.NotEnoughReplicas},
		{NotEnoughReplicasAfterAppend, kerr.NotEnoughReplicasAfterAppend, kafkago.NotEnoughReplicasAfterAppend},
		{NotController, kerr.NotController, kafkago.NotController},
		{KafkaStorageError, kerr.KafkaStorageError, kafkago.KafkaStorageError},
		{FencedLeaderEpoch, kerr.FencedLeaderEpoch, kafkago.FencedLeaderEpoch},
		{UnknownLeaderEpoch, kerr.UnknownLeaderEpoch, kafkago.UnknownLeaderEpoch},
		{PreferredLeaderNotAvailable, kerr.PreferredLeaderNotAvailable, kafkago.PreferredLeaderNotAvailable},
		{EligibleLeadersNotAvailable, kerr.EligibleLeadersNotAvailable, kafkago.EligibleLeadersNotAvailable},
		{ThrottlingQuotaExceeded, kerr.ThrottlingQuotaExceeded, kafkago.ThrottlingQuotaExceeded},
	} {
		if tc.kgo.Code != tc.ours || int16(tc.kgoer) != tc.ours {
			t.Errorf("code %d: franz-go says %d (%s), kafka-go %d", tc.ours, tc.kgo.Code, tc.kgo.Message, tc.kgoer)
		}
		if Code(tc.ours) != breaker.Failure {
			t.Errorf("Code(%d) = %v, want Failure", tc.ours, Code(tc.ours))
		}
	}
	for _, tc := range []struct {
		err  *kerr.Error
		ours int16
		want breaker.Outcome
	}{
		{kerr.UnknownTopicOrPartition, UnknownTopicOrPartition, breaker.Unusable},
		{kerr.InvalidTopicException, InvalidTopicException, breaker.Unusable},
		{kerr.InvalidRequiredAcks, InvalidRequiredAcks, breaker.Unusable},
		{kerr.TopicAuthorizationFailed, TopicAuthorizationFailed, breaker.Unusable},
		{kerr.ClusterAuthorizationFailed, ClusterAuthorizationFailed, breaker.Unusable},
		{kerr.UnsupportedForMessageFormat, UnsupportedForMessageFormat, breaker.Unusable},
		{kerr.TransactionalIDAuthorizationFailed, TransactionalIDAuthorizationFailed, breaker.Unusable},
		{kerr.SaslAuthenticationFailed, SaslAuthenticationFailed, breaker.Unusable},
		{kerr.UnsupportedCompressionType, UnsupportedCompressionType, breaker.Unusable},
		{kerr.CorruptMessage, CorruptMessage, breaker.Rejected},
		{kerr.MessageTooLarge, MessageTooLarge, breaker.Rejected},
		{kerr.RecordListTooLarge, RecordListTooLarge, breaker.Rejected},
		{kerr.InvalidTimestamp, InvalidTimestamp, breaker.Rejected},
		{kerr.InvalidRecord, InvalidRecord, breaker.Rejected},
		{kerr.PolicyViolation, kerr.PolicyViolation.Code, breaker.Neutral},
	} {
		if tc.err.Code != tc.ours {
			t.Errorf("code %d: franz-go says %d (%s)", tc.ours, tc.err.Code, tc.err.Message)
		}
		if got := Code(tc.err.Code); got != tc.want {
			t.Errorf("Code(%d %s) = %v, want %v", tc.err.Code, tc.err.Message, got, tc.want)
		}
	}
	if Code(0) != breaker.Success {
		t.Errorf("Code(0) = %v", Code(0))
	}
}

func TestConn(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		err  error
		want breaker.Outcome
		ok   bool
	}{
		{dial, breaker.Failure, true},
		{&net.DNSError{Err: "no such host"}, breaker.Failure, true},
		{syscall.ECONNRESET, breaker.Failure, true},
		{syscall.EACCES, breaker.Neutral, true},
		{io.EOF, breaker.Failure, true},
		{io.ErrUnexpectedEOF, breaker.Failure, true},
		{os.ErrDeadlineExceeded, breaker.Failure, true},
		{context.DeadlineExceeded, 0, false},
		{context.Canceled, 0, false},
		{fmt.Errorf("wrapped: %w", io.EOF), 0, false}, // one link at a time
		{errors.New("other"), 0, false},
	} {
		if got, ok := Conn(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("Conn(%v) = %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}
