package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// One broker of three down costs its partitions only: keyed calls to the others keep
// their goodput, keyed calls to the dead one are refused fast once its partitions
// are isolated, and unkeyed calls avoid them (harness.RunPartitionScenario).
func TestOneDeadBrokerCostsItsPartitions(t *testing.T) {
	hash := &kafkago.Hash{}
	writer := func(cluster *kfake.Cluster, topic string, deadline time.Duration) *kafkago.Writer {
		w := &kafkago.Writer{
			Addr: kafkago.TCP(cluster.ListenAddrs()...), Topic: topic, Balancer: &kafkago.Hash{},
			// Each writer its own transport: kafka-go's shared default transport kept
			// metadata from before the test moved the partitions' leaders.
			Transport:    &kafkago.Transport{MetadataTTL: time.Second},
			RequiredAcks: kafkago.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond,
			WriteTimeout: deadline, ReadTimeout: max(deadline, 2*time.Second),
		}
		t.Cleanup(func() { w.Close(); w.Transport.(*kafkago.Transport).CloseIdleConnections() })
		return w
	}
	harness.RunPartitionScenario(t, harness.PartitionClient{
		Name: "kafka-go",
		PartitionOf: func(key []byte, n int) int {
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			return hash.Balance(kafkago.Message{Key: key}, all...)
		},
		Raw: func(cluster *kfake.Cluster, topic string, deadline time.Duration) harness.PublishKey {
			w := writer(cluster, topic, deadline)
			return func(ctx context.Context, key []byte) error {
				return w.WriteMessages(ctx, kafkago.Message{Key: key, Value: []byte("v")})
			}
		},
		Guarded: func(cluster *kfake.Cluster, reg *registry.Registry, topic string, deadline time.Duration) harness.PublishKey {
			pub, err := kafka.NewPublisher(writer(cluster, topic, deadline), reg)
			if err != nil {
				t.Fatal(err)
			}
			d := transport.Destination{Broker: kafka.Broker, Name: topic}
			return func(ctx context.Context, key []byte) error {
				return pub.Publish(ctx, d, transport.Message{Key: key, Value: []byte("v")})
			}
		},
	})
}

// PartitionOf, which the outbox asks, names the partition the writer really
// writes a key to; with kafka-go's RoundRobin it places no key.
func TestPartitionOfMatchesTheWriter(t *testing.T) {
	cluster := harness.KFake(t, kfake.NumBrokers(1))
	topic := harness.TopicNames("partition-of")[0]
	if err := cluster.CreateTopic(topic, 6, nil); err != nil {
		t.Fatal(err)
	}
	newPub := func(b kafkago.Balancer) *kafka.Publisher {
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		tr := &kafkago.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		pub, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP(cluster.ListenAddrs()...), Topic: topic,
			Balancer: b, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireOne}, reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close(context.Background()) })
		return pub
	}
	d := transport.Destination{Broker: kafka.Broker, Name: topic}
	pub := newPub(&kafkago.Murmur2Balancer{})
	keys := harness.Keys(40)
	if _, _, ok := pub.PartitionOf(d, keys[0]); ok {
		t.Fatal("a key placed before the writer knew the partitions")
	}
	for _, k := range keys {
		if err := pub.Publish(context.Background(), d, transport.Message{Key: k, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range harness.ReadTopic(t, cluster.ListenAddrs(), topic, len(keys)) {
		p, until, ok := pub.PartitionOf(d, r.Key)
		if !ok || p != int(r.Partition) || !until.IsZero() {
			t.Fatalf("key %s: PartitionOf = %d, %v, %v; written to %d", r.Key, p, until, ok, r.Partition)
		}
	}
	rr := newPub(nil)
	if err := rr.Publish(context.Background(), d, transport.Message{Key: keys[0], Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := rr.PartitionOf(d, keys[0]); ok {
		t.Fatal("RoundRobin placed a key")
	}
}

// The outbox through one dead broker of three: the healthy partitions' rows go out
// while the dead ones' are held alone (no attempt spent, no destination hold), and
// once the broker is back they go out, each key's rows in order.
func TestOutboxOneDeadBroker(t *testing.T) {
	faults := &harness.BrokerFaults{}
	cluster := harness.KFake(t, kfake.NumBrokers(3), faults.Opt())
	const parts, node = 6, 1
	topic := harness.TopicNames("outbox-partitions")[0]
	dead := harness.PartitionTopic(t, cluster, topic, parts, node)
	tr := &kafkago.Transport{MetadataTTL: time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kafkago.Writer{
		Addr: kafkago.TCP(cluster.ListenAddrs()...), Topic: topic, Balancer: &kafkago.Hash{}, Transport: tr,
		RequiredAcks: kafkago.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, ReadTimeout: time.Second,
	}
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(w, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close(context.Background()) })
	d := transport.Destination{Broker: kafka.Broker, Name: topic}
	ctx := context.Background()
	if err := pub.Publish(ctx, d, transport.Message{Key: []byte("warm-up"), Value: []byte("-1")}); err != nil {
		t.Fatal(err) // the writer learns the partitions
	}

	store := memory.New(nil)
	keys := harness.Keys(120)
	hash := &kafkago.Hash{}
	all := []int{0, 1, 2, 3, 4, 5}
	var entries []outbox.Entry
	healthyRows := 0
	for v := range 5 {
		for _, k := range keys {
			entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Key: k, Value: []byte(strconv.Itoa(v))}})
			if !dead[hash.Balance(kafkago.Message{Key: k}, all...)] {
				healthyRows++
			}
		}
	}
	if _, err := store.Enqueue(ctx, entries...); err != nil {
		t.Fatal(err)
	}
	proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClassifier(kafka.Classify),
		outbox.WithLease(2*time.Second), outbox.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	count := func() (healthyDone, deadPending, attempts int) {
		for _, r := range store.Records() {
			isDead := dead[hash.Balance(kafkago.Message{Key: r.Message.Key}, all...)]
			switch {
			case !isDead && r.Status == outbox.StatusPublished:
				healthyDone++
			case isDead && r.Status == outbox.StatusPending:
				deadPending++
			}
			if isDead {
				attempts += r.Attempts
			}
		}
		return
	}

	faults.Set(node, harness.BlackHole)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(rctx) }()
	start := time.Now()
	var healthyAt time.Duration
	for time.Since(start) < 60*time.Second {
		if h, _, _ := count(); h == healthyRows {
			healthyAt = time.Since(start)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	h, deadPending, attempts := count()
	t.Logf("broker %d hung: %d of %d healthy rows published after %v; dead partitions: %d rows pending, %d attempts; isolated %+v",
		node, h, healthyRows, healthyAt, deadPending, attempts, reg.IsolatedPartitions(d))
	if float64(h) < 0.95*float64(healthyRows) {
		t.Errorf("%d of %d healthy rows published within 60 s, want >= 95%%", h, healthyRows)
	}
	if attempts != 0 || deadPending != len(entries)-healthyRows {
		t.Errorf("dead partitions: %d of %d rows pending, %d attempts spent; want all pending, none spent", deadPending, len(entries)-healthyRows, attempts)
	}
	if _, held := store.HeldUntil(d); held {
		t.Error("the topic was held for one broker's partitions")
	}

	faults.Set(node, harness.Refuse)
	time.Sleep(time.Second)
	faults.Set(node, harness.Healthy)
	back := time.Now()
	for time.Since(back) < 60*time.Second {
		if _, p, _ := count(); p == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, p, a := count(); p != 0 || a != 0 {
		t.Fatalf("after the broker returned: %d rows pending, %d attempts spent", p, a)
	}
	t.Logf("the dead partitions' rows went out %v after the broker returned", time.Since(back).Round(time.Millisecond))
	// Each key's rows reached Kafka in order, each at least once.
	recs := harness.ReadTopic(t, []string{cluster.ListenAddrs()[0]}, topic, len(entries)+1)
	last := map[string]int{}
	for _, r := range recs {
		v, _ := strconv.Atoi(string(r.Value))
		if prev, ok := last[string(r.Key)]; ok && v < prev {
			t.Fatalf("key %s: row %d after row %d", r.Key, v, last[string(r.Key)])
		}
		last[string(r.Key)] = v
	}
}
