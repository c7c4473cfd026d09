package harness

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const kafkaHint = "start the brokers in KAFKA_BROKERS, or unset it to use the in-process kfake cluster"

// Kafka returns the brokers listed in KAFKA_BROKERS (comma-separated host:port) once
// each accepts TCP connections. It returns nil, nil when the variable is unset: the
// caller then uses an in-process kfake cluster (see KafkaBrokers).
func Kafka() (brokers []string, err error) {
	list, unset := envOr("KAFKA_BROKERS", "")
	if unset {
		return nil, nil
	}
	for b := range strings.SplitSeq(list, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if err := dial(b); err != nil {
			return nil, &UnavailableError{Service: serviceKafka, Addr: b, Hint: kafkaHint, Err: err}
		}
		brokers = append(brokers, b)
	}
	return brokers, nil
}

// KafkaBrokers returns the brokers from KAFKA_BROKERS, with a nil cluster, when the
// variable is set. Otherwise it starts an in-process kfake cluster with one broker and
// the given options (later options win, so kfake.NumBrokers(3) gives three), closes it
// when the test ends, and returns its addresses and the cluster for the test's own
// fault injection (ControlKey, Fault, ...). Tests that need the cluster should skip
// when it is nil.
func KafkaBrokers(t testing.TB, opts ...kfake.Opt) ([]string, *kfake.Cluster) {
	t.Helper()
	brokers, err := Kafka()
	Require(t, serviceKafka, err)
	if brokers != nil {
		return brokers, nil
	}
	c := KFake(t, opts...)
	return c.ListenAddrs(), c
}

// KFake starts an in-process kfake cluster with one broker and the given options,
// whatever KAFKA_BROKERS says, and closes it when the test ends.
func KFake(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("harness: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TopicNames returns a unique topic name for each stem, so that runs against a
// long-lived Kafka, or tests sharing a cluster, never read each other's messages.
func TopicNames(stems ...string) []string {
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	out := make([]string, len(stems))
	for i, s := range stems {
		out[i] = s + "-" + suffix
	}
	return out
}

// ReadTopic consumes want records of topic from the start (with a franz-go client),
// failing t when they do not all arrive within 20 seconds.
func ReadTopic(t testing.TB, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < want {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: got %d of %d records before the deadline", topic, len(recs), want)
		}
		if errs := f.Errors(); len(errs) > 0 {
			t.Fatalf("read %s: %v", topic, errs)
		}
		recs = append(recs, f.Records()...)
	}
	return recs
}
