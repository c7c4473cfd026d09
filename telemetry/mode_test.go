package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Rollout modes show in telemetry: what Shadow would have rejected and what FailOpen
// let through, per destination; an enforcing circuit has no such series. Those calls
// are bypasses, not probes: no probe was admitted, so none is counted.
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
	probes := e.collect().matching("brokerguard.circuit.probes")
	for _, d := range []string{"messaging.destination.name=shadowed,messaging.system=kafka", "messaging.destination.name=audit,messaging.system=rabbitmq"} {
		if got := probes["brokerguard.circuit.probes{"+d+",outcome=failure}"]; got != 0 {
			t.Errorf("%s: %v failed probes, want 0", d, got)
		}
	}
	if inst := e.collect().instruments["brokerguard.circuit.bypassed"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}
