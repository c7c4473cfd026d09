package kafka_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is one test's brokers, topics and guarded writer.
type env struct {
	t       testing.TB
	brokers []string
	cluster *kfake.Cluster // nil against KAFKA_BROKERS
	topics  []string
	dials   atomic.Int64 // connections the writer's transport opened
	tr      *kafkago.Transport
	w       *kafkago.Writer
	clock   *fakeclock.Clock
	regOpts []registry.Option // set by newEnv's configure
	reg     *registry.Registry
	pub     *kafka.Publisher
}

// newEnv starts kfake with the topics seeded (or creates them on KAFKA_BROKERS) and
// returns a synchronous guarded writer with the settings the package recommends.
func newEnv(t testing.TB, policy breaker.Policy, configure func(*env), stems ...string) *env {
	t.Helper()
	return newEnvWith(t, policy, configure, nil, stems...)
}

// newEnvWith is newEnv with options for the kfake cluster.
func newEnvWith(t testing.TB, policy breaker.Policy, configure func(*env), kopts []kfake.Opt, stems ...string) *env {
	t.Helper()
	topics := harness.TopicNames(stems...)
	brokers, cluster := harness.KafkaBrokers(t, append(kopts, kfake.SeedTopics(1, topics...))...)
	e := &env{t: t, brokers: brokers, cluster: cluster, topics: topics, clock: fakeclock.New(t0)}
	if cluster == nil {
		createTopics(t, brokers, topics)
	}
	e.tr = &kafkago.Transport{
		DialTimeout: 2 * time.Second,
		MetadataTTL: time.Hour, // no background metadata dials while a test counts dials
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			e.dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(e.tr.CloseIdleConnections)
	e.w = &kafkago.Writer{
		Addr:         kafkago.TCP(brokers...),
		Transport:    e.tr,
		RequiredAcks: kafkago.RequireAll,
		MaxAttempts:  1,
		BatchTimeout: time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		ReadTimeout:  2 * time.Second,
	}
	if configure != nil {
		configure(e)
	}
	var err error
	if e.reg, err = registry.New(registry.Policy{Circuit: policy}, append([]registry.Option{registry.WithClock(e.clock)}, e.regOpts...)...); err != nil {
		t.Fatal(err)
	}
	e.pub = newPublisher(t, e)
	return e
}

// newPublisher makes a publisher over e's writer and registry, closed when the test
// ends.
func newPublisher(t testing.TB, e *env, opts ...kafka.Option) *kafka.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(e.w, e.reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pub.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return pub
}

// createTopics creates one-partition topics on a real cluster.
func createTopics(t testing.TB, brokers []string, topics []string) {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	req := &kafkago.CreateTopicsRequest{}
	for _, name := range topics {
		req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: name, NumPartitions: 1, ReplicationFactor: 1})
	}
	res, err := c.CreateTopics(context.Background(), req)
	if err != nil {
		t.Fatalf("create topics: %v", err)
	}
	for name, err := range res.Errors {
		if err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
	}
}

// needKFake skips a test that injects faults when the brokers are not kfake.
func (e *env) needKFake() {
	if e.cluster == nil {
		e.t.Skip("needs kfake fault injection; KAFKA_BROKERS points at a real cluster")
	}
}

func (e *env) dest(i int) transport.Destination {
	return transport.Destination{Broker: kafka.Broker, Name: e.topics[i]}
}

func (e *env) circuit(i int) breaker.Snapshot {
	c, err := e.reg.Circuit(e.dest(i))
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Snapshot()
}

// answerProduce is kfakeproduce.Answer: code for the next (or every) Produce request.
func answerProduce(c *kfake.Cluster, code int16, keep bool, match func(topic string) bool) *atomic.Int64 {
	return kfakeproduce.Answer(c, code, keep, match)
}

// hangProduce is kfakeproduce.Hang: no answer to the next (or every) Produce request.
func hangProduce(c *kfake.Cluster, keep bool, onRequest func()) {
	kfakeproduce.Hang(c, keep, onRequest)
}

// produceCounter counts the Produce requests per topic that reach the cluster,
// without handling them.
type produceCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func countProduce(c *kfake.Cluster) *produceCounter {
	pc := &produceCounter{n: map[string]int{}}
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pc.mu.Lock()
		defer pc.mu.Unlock()
		for _, t := range r.(*kmsg.ProduceRequest).Topics {
			pc.n[t.Topic]++
		}
		return nil, nil, false
	})
	return pc
}

func (pc *produceCounter) get(topic string) int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.n[topic]
}

func msg(i int) transport.Message {
	return transport.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
}

func transportDest(topic string) transport.Destination {
	return transport.Destination{Broker: kafka.Broker, Name: topic}
}
