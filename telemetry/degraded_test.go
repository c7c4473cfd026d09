package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A shared circuit whose store refuses its failures reports itself degraded, and its
// local opening shows as an open state: the unhealthy alert can fire.
func TestSharedDegraded(t *testing.T) {
	store := &circuittest.MemoryDriver{}
	var e *env
	factory := func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return sharedstate.New(sharedstate.Config{Identity: d.String(), Policy: p, Scope: breaker.SharedDependency,
			Driver: store, Clock: e.clock})
	}
	p := breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Scope: breaker.SharedDependency}
	e = newEnv(t, p, []registry.Option{registry.WithCircuitFactory(breaker.SharedDependency, factory)})
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	e.publish(orders)
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	if got := e.collect().matching("brokerguard.circuit.shared.degraded"); len(got) != 0 {
		t.Fatalf("a healthy store: %v; want no degraded series", got)
	}
	store.RefuseWrites(errDown)
	e.raw.set(orders, errDown)
	e.publish(orders)
	e.publish(orders)
	c := e.collect()
	equalSeries(t, "degraded", map[string]float64{"brokerguard.circuit.shared.degraded{" + d: 1},
		c.matching("brokerguard.circuit.shared.degraded"))
	if got := c.series["brokerguard.circuit.state{brokerguard.circuit.mode=enforce,brokerguard.circuit.state=open,"+d]; got != 1 {
		t.Errorf("state open = %v after the threshold with writes refused; want 1", got)
	}
	if inst := c.instruments["brokerguard.circuit.shared.degraded"]; inst.kind != "updowncounter" || inst.unit != "1" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}
