package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Rollout modes show in telemetry: what Shadow would have rejected and what FailOpen
// let through, per destination; an enforcing circuit has no such series.
func TestBypassedCallsAreCountedByKind(t *testing.T) {
	failing := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	shadow, failOpen := failing, failing
	shadow.Mode, failOpen.Mode = breaker.Shadow, breaker.FailOpen
	e := newEnv(t, failing, []registry.Option{
		registry.WithOverride("kafka:shadowed", shadow),
		registry.WithOverride("amqp:audit", failOpen),
	})
	shadowed := transport.Destination{Broker: "kafka", Name: "shadowed"}
	audit := transport.Destination{Broker: "amqp", Name: "audit"}
	enforced := transport.Destination{Broker: "kafka", Name: "enforced"}
	for _, d := range []transport.Destination{shadowed, audit, enforced} {
		e.raw.set(d, errDown)
	}
	for range 3 { // the first call of each opens its circuit; the next two would be refused
		for _, d := range []transport.Destination{shadowed, audit, enforced} {
			e.publish(d)
		}
	}
	got := e.collect().matching("brokerguard.circuit.bypassed")
	equalSeries(t, "bypassed", map[string]float64{
		"brokerguard.circuit.bypassed{kind=would_reject,messaging.destination.name=shadowed,messaging.system=kafka}": 2,
		"brokerguard.circuit.bypassed{kind=bypass,messaging.destination.name=audit,messaging.system=rabbitmq}":       2,
	}, got)
	if inst := e.collect().instruments["brokerguard.circuit.bypassed"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}

// The calls a Shadow or FailOpen circuit admits while it is open are bypasses, not
// probes: only an enforcing circuit's admitted calls count as probes.
func TestBypassesAreNotCountedAsProbes(t *testing.T) {
	failing := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	shadow, failOpen := failing, failing
	shadow.Mode, failOpen.Mode = breaker.Shadow, breaker.FailOpen
	e := newEnv(t, failing, []registry.Option{
		registry.WithOverride("kafka:shadowed", shadow),
		registry.WithOverride("amqp:audit", failOpen),
	})
	shadowed := transport.Destination{Broker: "kafka", Name: "shadowed"}
	audit := transport.Destination{Broker: "amqp", Name: "audit"}
	for _, d := range []transport.Destination{shadowed, audit} {
		e.raw.set(d, errDown)
		for range 3 { // the first call opens the circuit; the next two are bypasses
			e.publish(d)
		}
	}
	c := e.collect()
	for _, s := range []string{
		"brokerguard.circuit.probes{messaging.destination.name=shadowed,messaging.system=kafka,outcome=failure}",
		"brokerguard.circuit.probes{messaging.destination.name=audit,messaging.system=rabbitmq,outcome=failure}",
	} {
		if got, ok := c.series[s]; !ok || got != 0 {
			t.Errorf("%s = %v (present %v), want 0: no probe was admitted", s, got, ok)
		}
	}
	for _, s := range []string{
		"brokerguard.circuit.bypassed{kind=would_reject,messaging.destination.name=shadowed,messaging.system=kafka}",
		"brokerguard.circuit.bypassed{kind=bypass,messaging.destination.name=audit,messaging.system=rabbitmq}",
	} {
		if got := c.series[s]; got != 2 {
			t.Errorf("%s = %v, want 2", s, got)
		}
	}
}
