package amqp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
)

func TestRoundTripKeepsHeaders(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "direct", false)
	q := declareQueue(t, url, x, "orders", nil)
	s := newSetup(t, url, defaultPolicy, nil)

	msgs := []transport.Message{
		{Key: []byte("orders"), Value: []byte("first"), Headers: []transport.Header{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0, 1, 255}}}},
		{Key: []byte("orders"), Value: []byte("second")},
	}
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), msgs...); err != nil {
		t.Fatal(err)
	}
	// The default exchange routes by queue name.
	if err := s.pub.Publish(ctx(t), amqp.Destination(""), transport.Message{Key: []byte(q), Value: []byte("third")}); err != nil {
		t.Fatal(err)
	}
	ch := admin(t, url)
	for i, want := range []string{"first", "second", "third"} {
		d := get(t, ch, q)
		if string(d.Body) != want || d.DeliveryMode != amqp091.Persistent {
			t.Fatalf("message %d: body %q mode %d", i, d.Body, d.DeliveryMode)
		}
		if i == 0 {
			for _, h := range msgs[0].Headers {
				if v, ok := d.Headers[h.Key].([]byte); !ok || !bytes.Equal(v, h.Value) {
					t.Fatalf("header %s = %#v, want %v", h.Key, d.Headers[h.Key], h.Value)
				}
			}
			if len(d.Headers) != 2 {
				t.Fatalf("headers %v", d.Headers)
			}
		}
	}
	snaps := s.reg.Snapshots()
	_, conn := snaps[s.m.ConnectionDestination()]
	if _, ok := snaps[transport.Destination{Broker: "amqp", Name: "amq.default"}]; !ok || !conn || len(snaps) != 3 {
		t.Fatalf("circuits %v; want one for %s, one for amqp:amq.default and the connection's", snaps, x)
	}
}

// Concurrent publishes each take a channel of their own from the pool.
func TestConcurrentPublishes(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "fanout", false)
	q := declareQueue(t, url, x, "", nil)
	s := newSetup(t, url, defaultPolicy, nil, amqp.WithMaxIdleChannels(2))
	const workers, each = 6, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				msg := transport.Message{Value: []byte(fmt.Sprint(w, "-", i))}
				if err := s.pub.Publish(ctx(t), amqp.Destination(x), msg, msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ch := admin(t, url)
	info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil || info.Messages != workers*each*2 {
		t.Fatalf("queue holds %d messages (%v), want %d", info.Messages, err, workers*each*2)
	}
}

func TestMissingExchangeIsUnusableAndNamed(t *testing.T) {
	url := harness.AMQPURL(t)
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, nil)
	x := unique("missing")
	for range 2 { // a Failure would open the circuit after the first
		err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{Value: []byte("lost")})
		var ce *amqp.ChannelError
		if !errors.Is(err, amqp.ErrExchangeNotFound) || !errors.As(err, &ce) || ce.Err.Code != amqp091.NotFound {
			t.Fatalf("publish to a missing exchange: %v", err)
		}
		if !strings.Contains(err.Error(), `"`+x+`" does not exist`) {
			t.Fatalf("message does not name the exchange: %v", err)
		}
		if got := amqp.Classify(err); got != breaker.Unusable {
			t.Fatalf("Classify = %v", got)
		}
	}
	if snap := s.reg.Snapshots()[amqp.Destination(x)]; snap.State != breaker.Closed || snap.Failures != 0 ||
		!strings.Contains(snap.Unusable, "does not exist") {
		t.Fatalf("circuit %+v", snap)
	}
	// The broker closed that channel; the next publish gets a new one.
	y := declareExchange(t, url, "fanout", false)
	if err := s.pub.Publish(ctx(t), amqp.Destination(y), transport.Message{Value: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
}

func TestNackIsFailure(t *testing.T) {
	url := harness.AMQPURL(t)
	q := declareQueue(t, url, "", "", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 2, BreakDuration: breakLong}, nil)
	d := amqp.Destination("")
	msg := transport.Message{Key: []byte(q), Value: []byte("fills the queue")}
	if err := s.pub.Publish(ctx(t), d, msg); err != nil {
		t.Fatal(err)
	}
	err := s.pub.Publish(ctx(t), d, msg)
	var ce *amqp.ConfirmError
	if !errors.Is(err, amqp.ErrNacked) || !errors.As(err, &ce) || ce.Exchange != "" {
		t.Fatalf("publish to a full reject-publish queue: %v", err)
	}
	if got := amqp.Classify(err); got != breaker.Failure {
		t.Fatalf("Classify = %v", got)
	}
	// In a batch, the acked message is published and the nacked one is reported.
	q2 := declareQueue(t, url, "", "", amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	err = s.raw.Publish(ctx(t), d, transport.Message{Key: []byte(q2)}, transport.Message{Key: []byte(q2)})
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 1 || !errors.Is(be.Failed[0].Err, amqp.ErrNacked) {
		t.Fatalf("batch: %v", err)
	}
	if snap := s.reg.Snapshots()[d]; snap.Failures != 1 {
		t.Fatalf("failures %d, want 1", snap.Failures)
	}
}

func TestMandatoryReturnIsNeutral(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "direct", false)
	q := declareQueue(t, url, x, "bound", nil)
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, nil, amqp.WithMandatory())
	err := s.pub.Publish(ctx(t), amqp.Destination(x),
		transport.Message{Key: []byte("bound"), Value: []byte("routed")},
		transport.Message{Key: []byte("nowhere"), Value: []byte("unroutable")},
		transport.Message{Key: []byte("bound"), Value: []byte("routed too")})
	var be *transport.BatchError
	var re *amqp.ReturnedError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 1 || !errors.As(err, &re) {
		t.Fatalf("mandatory batch: %v", err)
	}
	if re.Code != amqp091.NoRoute || re.RoutingKey != "nowhere" || amqp.Classify(re) != breaker.Rejected {
		t.Fatalf("return %+v classified %v", re, amqp.Classify(re))
	}
	if snap := s.reg.Snapshots()[amqp.Destination(x)]; snap.State != breaker.Closed {
		t.Fatalf("circuit %v", snap.State)
	}
	ch := admin(t, url)
	for _, want := range []string{"routed", "routed too"} {
		if d := get(t, ch, q); string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
	}
}

// The broker's refusals that a publish cannot provoke through this API are produced
// with the SDK directly and classified.
func TestBrokerRefusalsAreNotFailures(t *testing.T) {
	url := harness.AMQPURL(t)

	internal := declareExchange(t, url, "fanout", true)
	s := newSetup(t, url, defaultPolicy, nil)
	err := s.pub.Publish(ctx(t), amqp.Destination(internal), transport.Message{Value: []byte("x")})
	var ce *amqp.ChannelError
	if !errors.As(err, &ce) || ce.Err.Code != amqp091.AccessRefused || amqp.Classify(err) != breaker.Unusable {
		t.Fatalf("publish to an internal exchange: %v (%v)", err, amqp.Classify(err))
	}

	ch := admin(t, url)
	q := declareQueue(t, url, "", "", nil)
	_, err = ch.QueueDeclare(q, true, false, false, false, nil) // durable differs
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || amqp.Classify(err) != breaker.Rejected {
		t.Fatalf("redeclare with other arguments: %v (%v)", err, amqp.Classify(err))
	}
	// The channel is closed now: using it gives amqp091.ErrClosed, a dead channel.
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if !errors.Is(err, amqp091.ErrClosed) || amqp.Classify(err) != breaker.Failure {
		t.Fatalf("closed channel: %v (%v)", err, amqp.Classify(err))
	}

	_, err = amqp091.Dial(strings.Replace(url, "guest:guest", "guest:wrong", 1))
	if !errors.As(err, &ae) || ae.Code != amqp091.AccessRefused || amqp.Classify(err) != breaker.Unusable {
		t.Fatalf("bad credentials: %v (%v)", err, amqp.Classify(err))
	}
}

func TestCallerCancellationIsNeutral(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "fanout", false)
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, nil)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.raw.Publish(c, amqp.Destination(x), transport.Message{})
	if !errors.Is(err, context.Canceled) || amqp.Classify(err) != breaker.Neutral {
		t.Fatalf("cancelled: %v (%v)", err, amqp.Classify(err))
	}
	if err := s.pub.Publish(c, amqp.Destination(x), transport.Message{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("guarded, cancelled: %v", err)
	}
	if snap := s.reg.Snapshots()[amqp.Destination(x)]; snap.State != breaker.Closed {
		t.Fatalf("circuit %v", snap.State)
	}
}
