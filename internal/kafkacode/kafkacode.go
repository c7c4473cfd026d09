// Package kafkacode judges Kafka protocol error codes and connection errors the same
// way for every Kafka client brokerguard guards (kafka-go, franz-go, sarama), so a
// broker's answer counts against a circuit whichever client received it.
package kafkacode

import (
	"context"
	"io"
	"net"
	"syscall"

	"github.com/brokerguard/brokerguard/breaker"
)

// Kafka protocol error codes that say the broker, or the path to the partition's
// leader, is unhealthy. Every other code is about the message, the topic or the
// client's configuration.
const (
	UnknownServerError           int16 = -1
	RequestTimedOut              int16 = 7
	LeaderNotAvailable           int16 = 5
	NotLeaderForPartition        int16 = 6
	BrokerNotAvailable           int16 = 8
	ReplicaNotAvailable          int16 = 9
	NetworkException             int16 = 13
	NotEnoughReplicas            int16 = 19
	NotEnoughReplicasAfterAppend int16 = 20
	NotController                int16 = 41
	KafkaStorageError            int16 = 56
	FencedLeaderEpoch            int16 = 74
	UnknownLeaderEpoch           int16 = 75
	PreferredLeaderNotAvailable  int16 = 80
	EligibleLeadersNotAvailable  int16 = 83
	ThrottlingQuotaExceeded      int16 = 89
)

// Kafka protocol error codes that say the topic cannot take any record from this
// client: it does not exist, these credentials may not write it, or the client's
// request is one the cluster does not accept. Every record to it fails until someone
// fixes the topic, the ACLs or the client's settings: Unusable.
const (
	UnknownTopicOrPartition            int16 = 3
	InvalidTopicException              int16 = 17
	InvalidRequiredAcks                int16 = 21
	TopicAuthorizationFailed           int16 = 29
	ClusterAuthorizationFailed         int16 = 31
	UnsupportedForMessageFormat        int16 = 43
	TransactionalIDAuthorizationFailed int16 = 53
	SaslAuthenticationFailed           int16 = 58
	UnsupportedCompressionType         int16 = 76
)

// Kafka protocol error codes that say the broker refused the record itself (its
// size, its bytes, its timestamp): Rejected.
const (
	CorruptMessage     int16 = 2
	MessageTooLarge    int16 = 10
	RecordListTooLarge int16 = 18
	InvalidTimestamp   int16 = 32
	InvalidRecord      int16 = 87
)

// Code is the outcome of a Kafka protocol error code: Failure, Unusable and Rejected
// for the codes above, Neutral for every other. Code 0 (no error) is Success.
func Code(code int16) breaker.Outcome {
	switch code {
	case 0:
		return breaker.Success
	case UnknownServerError, RequestTimedOut, LeaderNotAvailable, NotLeaderForPartition,
		BrokerNotAvailable, ReplicaNotAvailable, NetworkException, NotEnoughReplicas,
		NotEnoughReplicasAfterAppend, NotController, KafkaStorageError, FencedLeaderEpoch,
		UnknownLeaderEpoch, PreferredLeaderNotAvailable, EligibleLeadersNotAvailable,
		ThrottlingQuotaExceeded:
		return breaker.Failure
	case UnknownTopicOrPartition, InvalidTopicException, InvalidRequiredAcks,
		TopicAuthorizationFailed, ClusterAuthorizationFailed, UnsupportedForMessageFormat,
		TransactionalIDAuthorizationFailed, SaslAuthenticationFailed, UnsupportedCompressionType:
		return breaker.Unusable
	case CorruptMessage, MessageTooLarge, RecordListTooLarge, InvalidTimestamp, InvalidRecord:
		return breaker.Rejected
	}
	return breaker.Neutral
}

// Conn judges one link of an error chain when it is a connection-level error: a
// failed dial, read or write (*net.OpError), a name that does not resolve, a
// connection refused, reset or cut short (io.EOF, io.ErrUnexpectedEOF), a timeout.
// ok is false when err is none of these, the caller then looks further down the
// chain, and for the errors of a context: whose context ended decides what those say,
// which only the caller knows (context.DeadlineExceeded reports Timeout too).
func Conn(err error) (o breaker.Outcome, ok bool) {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return 0, false
	}
	switch e := err.(type) {
	case *net.OpError, *net.DNSError:
		return breaker.Failure, true
	case syscall.Errno:
		switch e {
		case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED,
			syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH:
			return breaker.Failure, true
		}
		return breaker.Neutral, true
	}
	switch err {
	case io.ErrUnexpectedEOF, io.EOF:
		return breaker.Failure, true
	}
	if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
		return breaker.Failure, true
	}
	return 0, false
}
