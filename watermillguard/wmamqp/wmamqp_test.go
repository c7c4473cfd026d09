package wmamqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/brokerguard/brokerguard/watermillguard"
	"github.com/brokerguard/brokerguard/watermillguard/wmamqp"
)

func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "brokerguard-test-wm-" + prefix + "-" + hex.EncodeToString(b)
}

// admin is a plain channel for declaring topology; what a test declares is deleted
// in cleanup on a connection of its own.
func admin(t testing.TB, amqpURL string) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func cleanup(t testing.TB, amqpURL string, exchanges, queues []string) {
	t.Cleanup(func() {
		ch := admin(t, amqpURL)
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range exchanges {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
}

// guarded returns a watermill-amqp publisher with confirms, over amqpURL, and the
// guard over it with wmamqp's classifier.
func guarded(t testing.TB, amqpURL string, reg *registry.Registry) (*wamqp.Publisher, *watermillguard.Publisher) {
	t.Helper()
	return guardedWith(t, amqpURL, reg, watermill.NopLogger{})
}

func guardedWith(t testing.TB, amqpURL string, reg *registry.Registry, logger watermill.LoggerAdapter) (*wamqp.Publisher, *watermillguard.Publisher) {
	t.Helper()
	cfg := wamqp.NewNonDurablePubSubConfig(amqpURL, nil)
	cfg.Publish.ConfirmDelivery = true
	cfg.Connection.Reconnect = &wamqp.ReconnectConfig{BackoffInitialInterval: 50 * time.Millisecond, BackoffMultiplier: 1, BackoffMaxInterval: 50 * time.Millisecond}
	raw, err := wamqp.NewPublisher(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	p, err := watermillguard.New(raw, reg, wmamqp.Broker, watermillguard.WithClassifier(wmamqp.Classifier(raw)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return raw, p
}

func newRegistry(t testing.TB, p breaker.Policy) *registry.Registry {
	reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithClock(fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func circuit(t *testing.T, reg *registry.Registry, topic string) breaker.Snapshot {
	c, err := reg.Circuit(transport.Destination{Broker: wmamqp.Broker, Name: topic})
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}

var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 1000}

// A queue bound to the topic's exchange that is full and rejects publishes makes
// RabbitMQ nack: watermill-amqp's "delivery not confirmed", a Failure. A message
// whose context ended is not published; a closed publisher is Neutral.
func TestNackCancelAndClose(t *testing.T) {
	amqpURL := harness.AMQPURL(t)
	reg := newRegistry(t, counting)
	raw, p := guarded(t, amqpURL, reg)
	topic, q := unique("x"), unique("q")
	cleanup(t, amqpURL, []string{topic}, []string{q})
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("declares the exchange"))); err != nil {
		t.Fatal(err)
	}
	ch := admin(t, amqpURL)
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "", topic, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("fills the queue"))); err != nil {
		t.Fatal(err)
	}
	err := raw.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("nacked")))
	if err == nil || wmamqp.Classifier(raw)(err) != breaker.Failure {
		t.Fatalf("nack: %v classified %v", err, wmamqp.Classifier(raw)(err))
	}
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("nacked"))); err == nil || circuit(t, reg, topic).Failures != 1 {
		t.Fatalf("nack through the guard: %v, %d failures", err, circuit(t, reg, topic).Failures)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := message.NewMessage(watermill.NewUUID(), []byte("cancelled"))
	m.SetContext(ctx)
	if err := p.Publish(topic, m); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled message: %v", err)
	}

	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	before := circuit(t, reg, topic).Failures
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("closed"))); err == nil || circuit(t, reg, topic).Failures != before {
		t.Errorf("closed publisher: %v, failures %d -> %d", err, before, circuit(t, reg, topic).Failures)
	}
	if s := circuit(t, reg, topic); s.InFlight != 0 {
		t.Errorf("%d permits in flight", s.InFlight)
	}
}

// The connection to the broker cut (a proxy between them closes): watermill-amqp is
// not connected, a Failure; its circuit opens and refuses without calling it, while
// another topic's circuit stays closed.
func TestConnectionLostOpensOnlyThatTopic(t *testing.T) {
	amqpURL := harness.AMQPURL(t)
	reg := newRegistry(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
	proxied, cut, _ := proxy(t, amqpURL)
	logged := &errorLogged{LoggerAdapter: watermill.NopLogger{}, first: make(chan struct{})}
	_, p := guardedWith(t, proxied, reg, logged)
	_, direct := guarded(t, amqpURL, reg)
	bad, good := unique("bad"), unique("good")
	cleanup(t, amqpURL, []string{bad, good}, nil)
	if err := p.Publish(bad, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	cut()
	// watermill-amqp (v3.0.2) marks itself disconnected by writing a field that its
	// Publish reads without synchronization, then logs the close: waiting for the log
	// keeps its race out of this test's -race run.
	<-logged.first
	var errs []error
	for range 2 {
		errs = append(errs, p.Publish(bad, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	}
	if errs[0] == nil || errs[1] == nil || circuit(t, reg, bad).State != breaker.Open {
		t.Fatalf("connection cut: %v, circuit %v", errs, circuit(t, reg, bad).State)
	}
	if err := p.Publish(bad, message.NewMessage(watermill.NewUUID(), []byte("x"))); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("open circuit: %v", err)
	}
	if err := direct.Publish(good, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Errorf("other topic: %v", err)
	}
}

// proxy forwards a local port to the broker in amqpURL. cut closes the port and every
// connection through it; hold stops passing on what the broker sends (a broker that
// hangs), until cut. It returns the URL through the proxy.
func proxy(t *testing.T, amqpURL string) (proxied string, cut, hold func()) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	held, stopped := make(chan struct{}), make(chan struct{})
	var holdOnce, cutOnce sync.Once
	cut = func() {
		cutOnce.Do(func() {
			close(stopped)
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
	}
	hold = func() { holdOnce.Do(func() { close(held) }) }
	t.Cleanup(cut)
	broker := u.Host
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", broker)
			if err != nil {
				in.Close()
				return
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { // the broker's bytes, until held
				defer in.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := out.Read(buf)
					select {
					case <-held: // keep the connection open, silent
						<-stopped
						return
					default:
					}
					if n > 0 {
						if _, werr := in.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String(), cut, hold
}

// errorLogged closes first on the first error logged.
type errorLogged struct {
	watermill.LoggerAdapter
	once  sync.Once
	first chan struct{}
}

func (l *errorLogged) Error(msg string, err error, fields watermill.LogFields) {
	l.once.Do(func() { close(l.first) })
}

// A broker that stops answering holds watermill-amqp's confirm forever; with
// WithReturnOnDone the caller's deadline ends the call, and a deadline that left the
// call its budget counts as a Failure, which opens the circuit.
func TestHungBrokerWithReturnOnDone(t *testing.T) {
	amqpURL := harness.AMQPURL(t)
	reg := newRegistry(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	proxied, cut, hold := proxy(t, amqpURL)
	cfg := wamqp.NewNonDurablePubSubConfig(proxied, nil)
	cfg.Publish.ConfirmDelivery = true
	raw, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := watermillguard.New(raw, reg, wmamqp.Broker, watermillguard.WithClassifier(wmamqp.Classifier(raw)), watermillguard.WithReturnOnDone())
	if err != nil {
		t.Fatal(err)
	}
	topic := unique("hung")
	cleanup(t, amqpURL, []string{topic}, nil)
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("declares the exchange"))); err != nil {
		t.Fatal(err)
	}
	hold()
	ctx, cancel := context.WithTimeout(context.Background(), 3*registry.DefaultMinCallBudget)
	defer cancel()
	m := message.NewMessage(watermill.NewUUID(), []byte("no confirm"))
	m.SetContext(ctx)
	if err := p.Publish(topic, m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung broker: %v", err)
	}
	if s := circuit(t, reg, topic); s.State != breaker.Open {
		t.Fatalf("circuit %v after a hung call with a fair deadline", s.State)
	}
	if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("refused"))); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("open circuit: %v", err)
	}
	cut() // ends the held confirm, so the publisher's goroutine and connection end
	_ = raw.Close()
}
