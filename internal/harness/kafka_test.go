package harness

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestKFakeRoundTrip(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", "")
	brokers, cluster := KafkaBrokers(t, kfake.SeedTopics(1, "orders"))
	if cluster == nil || len(brokers) != 1 {
		t.Fatalf("KafkaBrokers = %q, %v; want one kfake broker", brokers, cluster)
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := client.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte("k"), Value: []byte("v1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetches := client.PollFetches(ctx)
	if err := fetches.Err(); err != nil {
		t.Fatal(err)
	}
	records := fetches.Records()
	if len(records) != 1 || string(records[0].Key) != "k" || string(records[0].Value) != "v1" {
		t.Fatalf("fetched %d records (%v); want the one produced", len(records), records)
	}
}

func TestKafkaBrokersFromEnvironment(t *testing.T) {
	external := KFake(t).ListenAddrs()
	t.Setenv("KAFKA_BROKERS", external[0])
	brokers, cluster := KafkaBrokers(t)
	if cluster != nil || !slices.Equal(brokers, external) {
		t.Fatalf("KafkaBrokers = %q, %v; want %q and no in-process cluster", brokers, cluster, external)
	}
}
