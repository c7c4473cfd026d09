package telemetry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Calls a circuit turns away while ramping up after recovery are counted per
// destination, and are rejected calls too; a destination that never ramped has no
// ramp series.
func TestRampRefusals(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute}, nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	steady := transport.Destination{Broker: "kafka", Name: "steady"}
	e.publish(steady)
	e.raw.set(orders, errDown)
	e.publish(orders) // opens
	e.raw.set(orders, nil)
	e.clock.Advance(time.Second)
	e.publish(orders) // the probe closes: the ramp starts at 10 %
	refused := 0
	for range 100 {
		if err := e.publish(orders); errors.Is(err, breaker.ErrRamping) {
			refused++
		}
	}
	if refused < 80 {
		t.Fatalf("the ramp refused %d of 100 publishes, want about 90", refused)
	}
	c := e.collect()
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	equalSeries(t, "ramp refusals", map[string]float64{"brokerguard.circuit.ramp.refused{" + d: float64(refused)},
		c.matching("brokerguard.circuit.ramp.refused"))
	if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=rejected,"+d]; got != float64(refused) {
		t.Errorf("%v rejected calls, want the %d ramp refusals", got, refused)
	}
	if inst := c.instruments["brokerguard.circuit.ramp.refused"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}
