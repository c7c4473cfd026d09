package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// A destination whose publishes are classified Unusable has a duration gauge that
// grows while it lasts and drops to 0 at the next publish that goes through; the
// outbox's holds of it are counted. Its circuit stays closed.
func TestUnusableDestinationIsMeasured(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil)
	forbidden := errors.New("403 ACCESS_REFUSED")
	pub := e.reg.Guard(e.raw, func(err error) breaker.Outcome {
		if errors.Is(err, forbidden) {
			return breaker.Unusable
		}
		return breaker.Failure
	})
	d := transport.Destination{Broker: "amqp", Name: "orders"}
	key := "brokerguard.circuit.unusable.duration{messaging.destination.name=orders,messaging.system=rabbitmq}"
	holds := "brokerguard.outbox.unusable{messaging.destination.name=orders,messaging.system=rabbitmq}"
	publish := func() { _ = pub.Publish(context.Background(), d, transport.Message{Value: []byte("m")}) }

	publish()
	if _, ok := e.collect().series[key]; ok {
		t.Fatal("a usable destination has an unusable series")
	}
	e.raw.set(d, forbidden)
	publish()
	e.m.RecordUnusable(d, forbidden.Error())
	e.clock.Advance(90 * time.Second)
	publish()
	c := e.collect()
	if got := c.series[key]; got != 90 {
		t.Errorf("unusable for %v s, want 90", got)
	}
	if got := c.series[holds]; got != 1 {
		t.Errorf("%v outbox holds counted, want 1", got)
	}
	if s, _ := e.reg.Snapshot(d); s.State != breaker.Closed {
		t.Errorf("circuit %v, want closed", s.State)
	}
	e.raw.set(d, nil)
	publish()
	if got, ok := e.collect().series[key]; !ok || got != 0 {
		t.Errorf("after a publish went through: %v (present %v), want 0", got, ok)
	}
}
