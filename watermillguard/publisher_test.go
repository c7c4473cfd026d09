package watermillguard_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/brokerguard/brokerguard/watermillguard"
)

// failing is a message.Publisher that returns err for the topics in fail and hands
// the rest to next.
type failing struct {
	next  message.Publisher
	fail  map[string]error
	calls map[string]int
}

func (f *failing) Publish(topic string, msgs ...*message.Message) error {
	f.calls[topic]++
	if err := f.fail[topic]; err != nil {
		return err
	}
	return f.next.Publish(topic, msgs...)
}

func (f *failing) Close() error { return f.next.Close() }

var errBroker = errors.New("broker down")

func newGuard(t *testing.T, policy breaker.Policy) (*watermillguard.Publisher, *failing, *registry.Registry) {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: policy}, registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	f := &failing{next: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), fail: map[string]error{}, calls: map[string]int{}}
	classify := func(err error) breaker.Outcome {
		if errors.Is(err, errBroker) {
			return breaker.Failure
		}
		return breaker.Neutral
	}
	p, err := watermillguard.New(f, reg, "test", watermillguard.WithClassifier(classify))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, f, reg
}

func snapshot(t *testing.T, reg *registry.Registry, topic string) breaker.Snapshot {
	t.Helper()
	c, err := reg.Circuit(transport.Destination{Broker: "test", Name: topic})
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}

func TestOneCircuitPerTopic(t *testing.T) {
	p, f, reg := newGuard(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
	f.fail["bad"] = errBroker
	for range 2 {
		if err := p.Publish("bad", message.NewMessage("1", nil)); !errors.Is(err, errBroker) {
			t.Fatalf("bad: %v", err)
		}
	}
	if err := p.Publish("bad", message.NewMessage("2", nil)); !errors.Is(err, breaker.ErrOpen) || f.calls["bad"] != 2 {
		t.Fatalf("open topic: %v after %d calls", err, f.calls["bad"])
	}
	if err := p.Publish("good", message.NewMessage("3", nil)); err != nil {
		t.Fatalf("good topic: %v", err)
	}
	if s := snapshot(t, reg, "good"); s.State != breaker.Closed {
		t.Errorf("good topic's circuit is %v", s.State)
	}
}

// The first message's context is the call's: ended, the publisher is not called;
// an error the classifier calls Neutral counts nothing.
func TestMessageContextAndClassifier(t *testing.T) {
	p, f, reg := newGuard(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := message.NewMessage("1", nil)
	m.SetContext(ctx)
	if err := p.Publish("t", m); !errors.Is(err, context.Canceled) || f.calls["t"] != 0 {
		t.Fatalf("cancelled message: %v, %d calls", err, f.calls["t"])
	}
	f.fail["t"] = errors.New("marshal: bad payload")
	if err := p.Publish("t", message.NewMessage("2", nil)); err == nil {
		t.Fatal("no error")
	}
	if s := snapshot(t, reg, "t"); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("a Neutral error changed the circuit: %+v", s)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	reg, _ := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	for _, tc := range []struct {
		name   string
		pub    message.Publisher
		reg    *registry.Registry
		broker string
	}{{"nil publisher", nil, reg, "kafka"}, {"nil registry", pub, nil, "kafka"}, {"bad broker", pub, reg, "Kafka!"}} {
		if _, err := watermillguard.New(tc.pub, tc.reg, tc.broker); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// A publish of no messages is refused before a permit is taken, through Watermill's
// interface and through AsTransport.
func TestEmptyPublishRefused(t *testing.T) {
	p, f, _ := newGuard(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	if err := p.Publish("t"); !errors.Is(err, registry.ErrNoMessages) || f.calls["t"] != 0 {
		t.Errorf("empty publish: %v, %d calls", err, f.calls["t"])
	}
	if err := p.AsTransport().Publish(context.Background(), transport.Destination{Broker: "test", Name: "t"}); !errors.Is(err, registry.ErrNoMessages) {
		t.Errorf("empty publish through AsTransport: %v", err)
	}
}

// blocking is a message.Publisher that holds every call until release is closed.
type blocking struct{ release chan struct{} }

func (b blocking) Publish(string, ...*message.Message) error { <-b.release; return nil }
func (b blocking) Close() error                              { return nil }

// With WithReturnOnDone a publisher that ignores contexts cannot hold the caller past
// its deadline, and the registry's deadline rule judges the call. The deadlines run
// on synctest's clock.
func TestReturnOnDone(t *testing.T) { synctest.Test(t, testReturnOnDone) }

func testReturnOnDone(t *testing.T) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}}, registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	b := blocking{release: make(chan struct{})}
	defer close(b.release)
	p, err := watermillguard.New(b, reg, "test", watermillguard.WithReturnOnDone())
	if err != nil {
		t.Fatal(err)
	}
	publish := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		m := message.NewMessage("1", nil)
		m.SetContext(ctx)
		return p.Publish("t", m)
	}
	if err := publish(registry.DefaultMinCallBudget / 2); !errors.Is(err, context.DeadlineExceeded) || snapshot(t, reg, "t").Failures != 0 {
		t.Fatalf("short deadline: %v, %d failures", err, snapshot(t, reg, "t").Failures)
	}
	if err := publish(2 * registry.DefaultMinCallBudget); !errors.Is(err, context.DeadlineExceeded) || snapshot(t, reg, "t").State != breaker.Open {
		t.Fatalf("deadline with its budget: %v, circuit %v", err, snapshot(t, reg, "t").State)
	}
	if err := publish(time.Second); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("open circuit: %v", err)
	}
}

// Decorator guards the publishers of a Watermill router: a handler's output goes
// through the circuit of its topic.
func TestDecoratorInARouter(t *testing.T) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}}, registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddPublisherDecorators(watermillguard.Decorator(reg, "gochannel"))
	router.AddHandler("copy", "in", pubsub, "out", pubsub, func(m *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage(watermill.NewUUID(), m.Payload)}, nil
	})
	out, err := pubsub.Subscribe(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	if err := pubsub.Publish("in", message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	got := <-out
	got.Ack()
	if string(got.Payload) != "x" {
		t.Fatalf("payload %q", got.Payload)
	}
	if _, ok := reg.Snapshots()[transport.Destination{Broker: "gochannel", Name: "out"}]; !ok {
		t.Errorf("no circuit for the handler's output topic: %v", reg.Snapshots())
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
}
