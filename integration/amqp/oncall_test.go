package amqp_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/surfaces"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// RabbitMQ refusing connections (the test's own proxy resets them): the connection
// circuit that refuses the publishes is a circuit on-call can see. The refusal names
// amqp-connection:<host:port>; the admin API answers for that name, open, with the
// dials' last error; the registry's report lists it beside the exchange's; the
// observers were told it opened; telemetry exports its state.
func TestConnectionCircuitIsSeen(t *testing.T) {
	proxy, url := newProxy(t, harness.AMQPURL(t))
	x := declareExchange(t, harness.AMQPURL(t), "fanout", false)
	m, err := amqp.NewManager(url, amqp.WithRedialDelay(20*time.Millisecond),
		amqp.WithDialPolicy(breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	s := surfaces.New(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
	pub := publisherOn(t, m, s.Registry, nil)
	d := amqp.Destination(x)
	if err := pub.Publish(ctx(t), d, transport.Message{Value: []byte("v")}); err != nil {
		t.Fatalf("with the broker up: %v", err)
	}
	conn := m.ConnectionDestination()
	if code, c := s.Circuit(conn.String()); code != 200 || c.State != "closed" {
		t.Fatalf("admin, broker up: %d %+v; want the connection circuit, closed", code, c)
	}

	proxy.RefuseConnections()
	var refusal error
	waitFor(t, 10*time.Second, "a publish refused by the connection circuit", func() bool {
		err := pub.Publish(ctx(t), d, transport.Message{Value: []byte("v")})
		if err == nil {
			t.Fatal("a publish succeeded with connections refused")
		}
		if _, ok := errors.AsType[*amqp.DialError](err); ok && errors.Is(err, breaker.ErrOpen) {
			refusal = err
			return true
		}
		return false
	})
	oe, _ := errors.AsType[*breaker.OpenError](refusal)
	if oe == nil || oe.Identity != conn.String() || !strings.Contains(refusal.Error(), conn.String()) {
		t.Fatalf("refusal %v; want it to name %s", refusal, conn)
	}
	code, c := s.Circuit(oe.Identity)
	if code != 200 || c.State != "open" || c.LastError == "" {
		t.Fatalf("admin for %s: %d %+v; want open with the dials' last error", oe.Identity, code, c)
	}
	listed := false
	for _, r := range s.Registry.Report() {
		listed = listed || r.Destination == conn && r.Snapshot.State == breaker.Open
	}
	if !listed {
		t.Errorf("the registry's report does not list %s open", conn)
	}
	if got := s.Observed(); !slices.Contains(got, conn.String()+" closed->open "+breaker.ReasonFailureThreshold) {
		t.Errorf("observed %q; want the connection circuit's opening", got)
	}
	if n, _ := s.Metric("brokerguard.circuit.state", conn.Name, "brokerguard.circuit.state=open", "messaging.system="+amqp.ConnectionBroker); n != 1 {
		t.Errorf("state metric of %s open = %d, want 1", conn, n)
	}
}

// One registry takes one Manager's connection circuit per broker address: a second
// Manager for the same address is refused by NewPublisher, naming the clash.
func TestSecondManagerForOneBrokerAndRegistry(t *testing.T) {
	url := harness.AMQPURL(t)
	reg := newRegistry(t)
	var ms [2]*amqp.Manager
	for i := range ms {
		m, err := amqp.NewManager(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = m
	}
	publisherOn(t, ms[0], reg, nil)
	publisherOn(t, ms[0], reg, nil) // the same Manager again: one circuit
	if _, err := amqp.NewPublisher(ms[1], reg); err == nil || !strings.Contains(err.Error(), ms[1].ConnectionDestination().String()) {
		t.Fatalf("a second Manager's publisher: %v; want an error naming its connection circuit", err)
	}
}
