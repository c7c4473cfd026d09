package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
)

// A broker under a memory alarm blocks the connection. Publishes used to wait inside
// amqp091 for as long as the alarm lasted, permit held, and then end Neutral; they now
// fail at once with a *BlockedError, a Failure, and open the circuit.
func TestBlockedBrokerFailsFastAndOpens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node of its own (tens of seconds); not run with -short")
	}
	node := harness.NewRabbitNode(t) // the memory alarm would block every publisher of the machine's broker
	url := node.URL()
	x := declareExchange(t, url, "fanout", false)
	declareQueue(t, url, x, "", nil)
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 3, BreakDuration: breakLong, MaxInFlight: 10}, nil)
	d := amqp.Destination(x)
	if err := s.pub.Publish(ctx(t), d, transport.Message{Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	node.Block(t)
	var longest time.Duration
	for i := range 3 {
		c, cancel := context.WithTimeout(context.Background(), 3*time.Second) // below the 5s confirm timeout
		start := time.Now()
		err := s.pub.Publish(c, d, transport.Message{Value: []byte("blocked")})
		longest = max(longest, time.Since(start))
		cancel()
		var be *amqp.BlockedError
		if !errors.As(err, &be) || amqp.Classify(err) != breaker.Failure || be.Reason == "" {
			t.Fatalf("publish %d to a blocked broker: %v (%v), want a *BlockedError, Failure", i, err, amqp.Classify(err))
		}
	}
	err := s.pub.Publish(ctx(t), d, transport.Message{Value: []byte("rejected")})
	if snap := s.reg.Snapshots()[d]; !errors.Is(err, breaker.ErrOpen) || snap.State != breaker.Open || snap.InFlight != 0 {
		t.Fatalf("after three blocked publishes: %v, %+v", err, snap)
	}
	t.Logf("three publishes to a blocked broker: the longest took %v", longest.Round(time.Millisecond))
}

// The caller's own Manager.Close with a publish waiting for its confirm used to nack
// it, a Failure although the broker was healthy; it is now ErrClosedInFlight,
// Neutral.
func TestManagerCloseLeavesInFlightPublishesNeutral(t *testing.T) {
	direct := harness.AMQPURL(t)
	x := declareExchange(t, direct, "fanout", false)
	declareQueue(t, direct, x, "", nil)
	p, url := newProxy(t, direct)
	s := newSetup(t, url+"?heartbeat=0", breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, []amqp.ManagerOption{amqp.WithDialTimeout(roomyDialTimeout)})
	d := amqp.Destination(x)
	if err := s.pub.Publish(ctx(t), d, transport.Message{Value: []byte("warm")}); err != nil { // leaves an idle channel
		t.Fatal(err)
	}
	p.Hold() // the confirm will not come back
	defer p.Resume()
	sent := p.Sent()
	done := make(chan error, 1)
	go func() { done <- s.pub.Publish(ctx(t), d, transport.Message{Value: []byte("in flight")}) }()
	for p.Sent() == sent { // the publish is on the wire
		time.Sleep(time.Millisecond)
	}
	if err := s.m.Close(); err == nil {
		t.Log("close confirmed") // the held broker cannot confirm; either way the publish ends
	}
	err := <-done
	if !errors.Is(err, amqp.ErrClosedInFlight) || !errors.Is(err, amqp.ErrManagerClosed) || amqp.Classify(err) != breaker.Neutral {
		t.Fatalf("publish in flight at Close: %v (%v), want ErrClosedInFlight, Neutral", err, amqp.Classify(err))
	}
	if snap := s.reg.Snapshots()[d]; snap.Failures != 0 || snap.State != breaker.Closed {
		t.Fatalf("the close counted against the broker: %+v", snap)
	}
}

// A publish still opening its channel when the caller closes the Manager is ended by
// the close too, not by the broker: Neutral, like one waiting for its confirm.
func TestManagerCloseWhileAChannelOpensIsNeutral(t *testing.T) {
	direct := harness.AMQPURL(t)
	x := declareExchange(t, direct, "fanout", false)
	p, url := newProxy(t, direct)
	s := newSetup(t, url+"?heartbeat=0", breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, []amqp.ManagerOption{amqp.WithDialTimeout(roomyDialTimeout)})
	d := amqp.Destination(x)
	if _, err := s.m.Connection(ctx(t)); err != nil { // connected, and no channel open yet
		t.Fatal(err)
	}
	p.Hold() // channel.open-ok will not come back
	defer p.Resume()
	sent := p.Sent()
	done := make(chan error, 1)
	go func() { done <- s.pub.Publish(ctx(t), d, transport.Message{Value: []byte("opening")}) }()
	for p.Sent() == sent { // channel.open is on the wire
		time.Sleep(time.Millisecond)
	}
	_ = s.m.Close() // the held broker cannot answer the close either
	err := <-done
	if !errors.Is(err, amqp.ErrManagerClosed) || amqp.Classify(err) != breaker.Neutral {
		t.Fatalf("publish opening its channel at Close: %v (%v), want ErrManagerClosed, Neutral", err, amqp.Classify(err))
	}
	if snap := s.reg.Snapshots()[d]; snap.Failures != 0 || snap.State != breaker.Closed {
		t.Fatalf("the close counted against the broker: %+v", snap)
	}
}
