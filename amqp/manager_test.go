package amqp_test

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A dead broker opens the connection circuit, which then rejects dials and publishes
// without dialing; Close leaves no goroutine behind.
func TestManagerFailsFastOnceTheBrokerIsKnownDead(t *testing.T) {
	before := runtime.NumGoroutine()
	addr := closedAddr(t)
	var opened []breaker.Transition
	m, err := amqp.NewManager("amqp://guest:guest@"+addr+"/",
		amqp.WithRedialDelay(time.Hour), // the watcher dials once; the test makes the rest
		amqp.WithDialPolicy(breaker.Policy{FailureThreshold: 2, BreakDuration: time.Hour}),
		amqp.WithDialBreakerOptions(breaker.WithObserver(func(tr breaker.Transition) { opened = append(opened, tr) })))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Circuit().Snapshot().Identity; got != "amqp-connection:"+addr {
		t.Fatalf("circuit %q", got)
	}
	pub, err := amqp.NewPublisher(m, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var refused int
	for range 3 { // the watcher's first dial and ours add up to the threshold
		_, err := m.Connection(ctx)
		var de *amqp.DialError
		if !errors.As(err, &de) || de.Addr != addr || amqp.Classify(err) != breaker.Failure {
			t.Fatalf("dial to a dead broker: %v", err)
		}
		if errors.Is(err, breaker.ErrOpen) {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial error %v, want connection refused", err)
		}
		refused++
	}
	if refused == 0 || m.Circuit().State() != breaker.Open {
		t.Fatalf("after %d refused dials the circuit is %v", refused, m.Circuit().State())
	}
	err = pub.Publish(ctx, amqp.Destination("orders"), transport.Message{})
	if !errors.Is(err, breaker.ErrOpen) || amqp.Classify(err) != breaker.Failure {
		t.Fatalf("publish with the connection circuit open: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || opened[0].To != breaker.Open {
		t.Fatalf("transitions %v", opened)
	}
	if _, err := m.Connection(ctx); !errors.Is(err, amqp.ErrManagerClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}

func TestPublishRejectsOtherBrokersAndChecksOptions(t *testing.T) {
	m, err := amqp.NewManager("amqp://guest:guest@" + closedAddr(t) + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pub, err := amqp.NewPublisher(m, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), transport.Destination{Broker: "kafka", Name: "orders"}, transport.Message{})
	if !errors.Is(err, amqp.ErrWrongBroker) || amqp.Classify(err) != breaker.Neutral {
		t.Fatalf("kafka destination: %v", err)
	}
	if err := pub.Publish(context.Background(), amqp.Destination("orders")); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("no messages: %v", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), amqp.Destination("orders"), transport.Message{})
	if !errors.Is(err, amqp.ErrPublisherClosed) || amqp.Classify(err) != breaker.Neutral {
		t.Fatalf("after Close: %v", err)
	}
	for name, f := range map[string]func() error{
		"confirm timeout": func() error { _, err := amqp.NewPublisher(m, testRegistry(t), amqp.WithConfirmTimeout(0)); return err },
		"idle channels": func() error {
			_, err := amqp.NewPublisher(m, testRegistry(t), amqp.WithMaxIdleChannels(-1))
			return err
		},
		"no registry":  func() error { _, err := amqp.NewPublisher(m, nil); return err },
		"max channels": func() error { _, err := amqp.NewManager("amqp://h/", amqp.WithMaxChannels(0)); return err },
		"max channels over ChannelMax": func() error {
			_, err := amqp.NewManager("amqp://h/", amqp.WithConfig(amqp091.Config{ChannelMax: 16}), amqp.WithMaxChannels(64))
			return err
		},
		"dial timeout": func() error { _, err := amqp.NewManager("amqp://h/", amqp.WithDialTimeout(0)); return err },
		"redial delay": func() error { _, err := amqp.NewManager("amqp://h/", amqp.WithRedialDelay(-1)); return err },
		"dial policy": func() error {
			_, err := amqp.NewManager("amqp://h/", amqp.WithDialPolicy(breaker.Policy{FailureThreshold: 1}))
			return err
		},
		"url": func() error { _, err := amqp.NewManager("http://h/"); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: invalid value accepted", name)
		}
	}
}

func TestDestinationNamesTheDefaultExchange(t *testing.T) {
	d := amqp.Destination("")
	if d.String() != "amqp:amq.default" || amqp.Exchange(d) != "" {
		t.Fatalf("default exchange: %v -> %q", d, amqp.Exchange(d))
	}
	d = amqp.Destination("orders")
	if d.String() != "amqp:orders" || amqp.Exchange(d) != "orders" {
		t.Fatalf("orders: %v -> %q", d, amqp.Exchange(d))
	}
}

// testRegistry is a registry for publishers under test.
func testRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
