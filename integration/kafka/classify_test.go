package kafka_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// high enough that no row opens the circuit, so each row's failure count shows.
var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute}

// TestClassifyBrokerCodes drives every broker error code of the table through the
// real writer: once with the raw writer, whose error Classify must judge, and once
// through the Publisher, whose circuit must count exactly the Failures.
func TestClassifyBrokerCodes(t *testing.T) {
	e := newEnv(t, counting, nil, "orders")
	e.needKFake()
	for _, tc := range []struct {
		code kafkago.Error
		want breaker.Outcome
	}{
		{kafkago.Unknown, breaker.Failure},
		{kafkago.RequestTimedOut, breaker.Failure},
		{kafkago.LeaderNotAvailable, breaker.Failure},
		{kafkago.NotLeaderForPartition, breaker.Failure},
		{kafkago.BrokerNotAvailable, breaker.Failure},
		{kafkago.ReplicaNotAvailable, breaker.Failure},
		{kafkago.NetworkException, breaker.Failure},
		{kafkago.NotEnoughReplicas, breaker.Failure},
		{kafkago.NotEnoughReplicasAfterAppend, breaker.Failure},
		{kafkago.NotController, breaker.Failure},
		{kafkago.KafkaStorageError, breaker.Failure},
		{kafkago.FencedLeaderEpoch, breaker.Failure},
		{kafkago.UnknownLeaderEpoch, breaker.Failure},
		{kafkago.PreferredLeaderNotAvailable, breaker.Failure},
		{kafkago.EligibleLeadersNotAvailable, breaker.Failure},
		{kafkago.ThrottlingQuotaExceeded, breaker.Failure},
		{kafkago.MessageSizeTooLarge, breaker.Rejected},
		{kafkago.InvalidMessage, breaker.Rejected},
		{kafkago.InvalidMessageSize, breaker.Neutral},
		{kafkago.RecordListTooLarge, breaker.Rejected},
		{kafkago.InvalidRecord, breaker.Rejected},
		{kafkago.InvalidTimestamp, breaker.Rejected},
		{kafkago.UnknownTopicOrPartition, breaker.Unusable},
		{kafkago.InvalidTopic, breaker.Unusable},
		{kafkago.TopicAuthorizationFailed, breaker.Unusable},
		{kafkago.ClusterAuthorizationFailed, breaker.Unusable},
		{kafkago.InvalidRequiredAcks, breaker.Unusable},
		{kafkago.UnsupportedVersion, breaker.Neutral},
		{kafkago.PolicyViolation, breaker.Neutral},
		{kafkago.InvalidProducerEpoch, breaker.Neutral},
	} {
		answerProduce(e.cluster, int16(tc.code), false, nil)
		raw := e.w.WriteMessages(context.Background(), kafkago.Message{Topic: e.topics[0], Value: []byte("raw")})
		var we kafkago.WriteErrors
		if !errors.As(raw, &we) || !errors.Is(we[0], tc.code) {
			t.Fatalf("code %d: the writer returned %v", tc.code, raw)
		}
		if got := kafka.Classify(raw); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", raw, got, tc.want)
		}
		checkPublish(t, e, tc.code.Title(), tc.want, func() error {
			answerProduce(e.cluster, int16(tc.code), false, nil)
			return e.pub.Publish(context.Background(), e.dest(0), msg(1))
		})
	}
}

// checkPublish runs publish and checks that Classify judges its error as want and
// that the circuit counted one failure exactly when want is Failure.
func checkPublish(t *testing.T, e *env, name string, want breaker.Outcome, publish func() error) error {
	t.Helper()
	before := e.circuit(0).Failures
	err := publish()
	if got := kafka.Classify(err); got != want {
		t.Errorf("%s: Classify(%v) = %v, want %v", name, err, got, want)
	}
	counted := e.circuit(0).Failures - before
	if wantCounted := map[bool]int{true: 1}[want == breaker.Failure]; counted != wantCounted {
		t.Errorf("%s: the circuit counted %d failures, want %d (err %v)", name, counted, wantCounted, err)
	}
	return err
}

func TestClassifyWriterAndClientErrors(t *testing.T) {
	e := newEnv(t, counting, nil, "orders")
	e.needKFake()
	ctx := context.Background()
	topic := e.topics[0]

	// No answer: the writer's own WriteTimeout ends the request.
	hangProduce(e.cluster, false, nil)
	raw := e.w.WriteMessages(ctx, kafkago.Message{Topic: topic, Value: []byte("x")})
	var we kafkago.WriteErrors
	var ne net.Error
	if !errors.As(raw, &we) || !errors.As(we[0], &ne) || !ne.Timeout() {
		t.Fatalf("no answer: %#v, want WriteErrors with a timeout", raw)
	}
	if kafka.Classify(raw) != breaker.Failure {
		t.Errorf("Classify(write timeout %v) is not a Failure", raw)
	}
	checkPublish(t, e, "write timeout", breaker.Failure, func() error {
		hangProduce(e.cluster, false, nil)
		return e.pub.Publish(ctx, e.dest(0), msg(1))
	})

	// The broker drops the connection in the middle of a request.
	drop := func() {
		e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			return nil, errors.New("drop the connection"), true
		})
	}
	drop()
	raw = e.w.WriteMessages(ctx, kafkago.Message{Topic: topic, Value: []byte("x")})
	if !errors.As(raw, &we) || !errors.Is(we[0], io.ErrUnexpectedEOF) || kafka.Classify(raw) != breaker.Failure {
		t.Errorf("dropped connection: %v classified %v", raw, kafka.Classify(raw))
	}
	checkPublish(t, e, "dropped connection", breaker.Failure, func() error { drop(); return e.pub.Publish(ctx, e.dest(0), msg(1)) })

	// The caller gives up while the broker holds the request: kafka-go returns the
	// bare context error. A cancel comes once the broker has the request; a deadline
	// is shorter than WriteTimeout.
	for _, tc := range []struct {
		name string
		want error
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"caller cancel", context.Canceled, func() (context.Context, context.CancelFunc) {
			cctx, cancel := context.WithCancel(ctx)
			hangProduce(e.cluster, false, cancel)
			return cctx, cancel
		}},
		{"caller deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			hangProduce(e.cluster, false, nil)
			return context.WithTimeout(ctx, 50*time.Millisecond)
		}},
	} {
		cctx, cancel := tc.ctx()
		raw = e.w.WriteMessages(cctx, kafkago.Message{Topic: topic, Value: []byte("x")})
		cancel()
		if raw != tc.want || kafka.Classify(raw) != breaker.Neutral {
			t.Errorf("%s: %#v classified %v", tc.name, raw, kafka.Classify(raw))
		}
		checkPublish(t, e, tc.name, breaker.Neutral, func() error {
			cctx, cancel := tc.ctx()
			defer cancel()
			return e.pub.Publish(cctx, e.dest(0), msg(1))
		})
	}

	// A message larger than the writer's BatchBytes never leaves the client.
	huge := make([]byte, 2<<20)
	raw = e.w.WriteMessages(ctx, kafkago.Message{Topic: topic, Value: huge})
	var tooLarge kafkago.MessageTooLargeError
	if !errors.As(raw, &tooLarge) || kafka.Classify(raw) != breaker.Rejected {
		t.Errorf("message too large: %v classified %v", raw, kafka.Classify(raw))
	}
	err := checkPublish(t, e, "message too large", breaker.Rejected, func() error {
		return e.pub.WriteMessages(ctx, kafkago.Message{Topic: topic, Value: huge})
	})
	if !errors.As(err, &tooLarge) {
		t.Errorf("the publisher's error %v hides the MessageTooLargeError", err)
	}

	// A topic the cluster does not have fails in the metadata lookup.
	raw = e.w.WriteMessages(ctx, kafkago.Message{Topic: "absent", Value: []byte("x")})
	if !errors.Is(raw, kafkago.UnknownTopicOrPartition) || kafka.Classify(raw) != breaker.Unusable {
		t.Errorf("unknown topic: %v classified %v", raw, kafka.Classify(raw))
	}
	absent := e.reg.FailureCount()
	if err := e.pub.WriteMessages(ctx, kafkago.Message{Topic: "absent", Value: []byte("x")}); !errors.Is(err, kafkago.UnknownTopicOrPartition) || kafka.Classify(err) != breaker.Unusable || e.reg.FailureCount() != absent {
		t.Errorf("unknown topic through the publisher: %v", err)
	}
	// The registry says why the topic cannot take messages, and its circuit stays closed.
	if s, ok := e.reg.Snapshot(transport.Destination{Broker: kafka.Broker, Name: "absent"}); !ok || s.State != breaker.Closed ||
		!strings.Contains(s.Unusable, "Unknown Topic Or Partition") || s.UnusableSince.IsZero() {
		t.Errorf("unknown topic: snapshot %+v, want closed and unusable with the reason", s)
	}
}

// Closing the cluster gives connection errors: inside WriteErrors for a writer that
// already knows the cluster, bare from the metadata lookup of a new one.
func TestClassifyConnectionErrors(t *testing.T) {
	e := newEnv(t, counting, nil, "orders")
	e.needKFake()
	ctx := context.Background()
	if err := e.pub.Publish(ctx, e.dest(0), msg(0)); err != nil {
		t.Fatal(err)
	}
	addrs := e.brokers
	e.cluster.Close()

	// The first write finds its pooled connection closed under it.
	raw := e.w.WriteMessages(ctx, kafkago.Message{Topic: e.topics[0], Value: []byte("x")})
	var we kafkago.WriteErrors
	if !errors.As(raw, &we) || !(errors.Is(we[0], io.ErrUnexpectedEOF) || errors.Is(we[0], syscall.ECONNRESET)) || kafka.Classify(raw) != breaker.Failure {
		t.Fatalf("pooled connection closed: %v classified %v", raw, kafka.Classify(raw))
	}
	// The next one dials.
	raw = e.w.WriteMessages(ctx, kafkago.Message{Topic: e.topics[0], Value: []byte("x")})
	var op *net.OpError
	if !errors.As(raw, &we) || !errors.As(we[0], &op) || !errors.Is(we[0], syscall.ECONNREFUSED) {
		t.Fatalf("known cluster closed: %v", raw)
	}
	if kafka.Classify(raw) != breaker.Failure {
		t.Errorf("Classify(%v) is not a Failure", raw)
	}
	checkPublish(t, e, "connection refused", breaker.Failure, func() error { return e.pub.Publish(ctx, e.dest(0), msg(1)) })

	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	fresh := &kafkago.Writer{Addr: kafkago.TCP(addrs...), Transport: tr, MaxAttempts: 1}
	raw = fresh.WriteMessages(ctx, kafkago.Message{Topic: e.topics[0], Value: []byte("x")})
	if !errors.As(raw, &op) || op.Op != "dial" || kafka.Classify(raw) != breaker.Failure {
		t.Errorf("new writer, cluster closed: %#v classified %v", raw, kafka.Classify(raw))
	}
	fresh.Close()
}

// A closed writer refuses writes with io.ErrClosedPipe: the application's doing.
func TestClassifyClosedWriter(t *testing.T) {
	brokers, _ := harness.KafkaBrokers(t, kfake.SeedTopics(1, "orders"))
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Transport: tr, RequiredAcks: kafkago.RequireAll}
	w.Close()
	raw := w.WriteMessages(context.Background(), kafkago.Message{Topic: "orders"})
	if raw != io.ErrClosedPipe || kafka.Classify(raw) != breaker.Neutral {
		t.Fatalf("closed writer: %v classified %v", raw, kafka.Classify(raw))
	}
	reg, err := registry.New(registry.Policy{Circuit: counting})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.WriteMessages(context.Background(), kafkago.Message{Topic: "orders"}); !errors.Is(err, io.ErrClosedPipe) || kafka.Classify(err) != breaker.Neutral || reg.FailureCount() != 0 {
		t.Fatalf("closed writer through the publisher: %v", err)
	}
	if err := pub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pub.WriteMessages(context.Background(), kafkago.Message{Topic: "orders"}); !errors.Is(err, kafka.ErrClosed) || !strings.HasPrefix(err.Error(), "kafka: ") {
		t.Fatalf("closed publisher: %v", err)
	}
}

// A partition whose metadata names no live leader: kafka-go's transport refuses the
// produce with protocol.ErrNoLeader, a plain string inside errors without Unwrap,
// which used to fall through to Neutral.
func TestClassifyPartitionWithoutLeader(t *testing.T) {
	e := newEnv(t, counting, nil, "orders")
	e.needKFake()
	topic := e.topics[0]
	kfakeproduce.NoLeader(e.cluster, topic)
	raw := e.w.WriteMessages(context.Background(), kafkago.Message{Topic: topic, Value: []byte("x")})
	var we kafkago.WriteErrors
	if !errors.As(raw, &we) || !errors.Is(we[0], protocol.ErrNoLeader) {
		t.Fatalf("the writer returned %v, want protocol.ErrNoLeader", raw)
	}
	if got := kafka.Classify(raw); got != breaker.Failure {
		t.Errorf("Classify(%v) = %v, want Failure", raw, got)
	}
	checkPublish(t, e, "no leader", breaker.Failure, func() error {
		return e.pub.Publish(context.Background(), e.dest(0), msg(1))
	})
}
