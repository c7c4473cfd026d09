package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Rollout modes show in telemetry: every circuit series that describes the circuit
// carries its mode, so that alerts can tell an enforcing circuit from one that lets
// traffic through; what Shadow would have rejected and what FailOpen let through are
// counted per destination; an enforcing circuit has no such series. Those calls are
// not probes, and their outcomes, which the circuit ignores, are not failures.
func TestModes(t *testing.T) {
	failing := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	shadow, failOpen := failing, failing
	shadow.Mode, failOpen.Mode = breaker.Shadow, breaker.FailOpen
	e := newEnv(t, failing, []registry.Option{
		registry.WithOverride("kafka:shadowed", registry.Policy{Circuit: shadow}),
		registry.WithOverride("amqp:audit", registry.Policy{Circuit: failOpen}),
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
	e.clock.Advance(time.Minute)
	c := e.collect()
	sh, au := "messaging.destination.name=shadowed,messaging.system=kafka}", "messaging.destination.name=audit,messaging.system=rabbitmq}"
	equalSeries(t, "bypassed", map[string]float64{
		"brokerguard.circuit.bypassed{brokerguard.circuit.mode=shadow," + sh:    2,
		"brokerguard.circuit.bypassed{brokerguard.circuit.mode=fail_open," + au: 2,
	}, c.matching("brokerguard.circuit.bypassed"))
	equalSeries(t, "unhealthy, by mode", map[string]float64{
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=shadow," + sh:                                                        60,
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=fail_open," + au:                                                     60,
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=enforce,messaging.destination.name=enforced,messaging.system=kafka}": 60,
	}, c.matching("brokerguard.circuit.unhealthy.duration"))
	for _, d := range []string{sh, au} {
		if got := c.series["brokerguard.circuit.state{brokerguard.circuit.mode="+map[string]string{sh: "shadow", au: "fail_open"}[d]+",brokerguard.circuit.state=open,"+d]; got != 1 {
			t.Errorf("%s: open = %v, want 1 with its mode", d, got)
		}
		if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=failed,"+d]; got != 1 {
			t.Errorf("%s: %v failed calls, want 1 (the opening one; the circuit ignored the others)", d, got)
		}
		if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=neutral,"+d]; got != 2 {
			t.Errorf("%s: %v neutral calls, want 2", d, got)
		}
	}
	if n := len(c.matching("brokerguard.circuit.probes")); n != 0 {
		t.Errorf("%d probe series; bypasses are not probes", n)
	}
	if inst := c.instruments["brokerguard.circuit.bypassed"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}
