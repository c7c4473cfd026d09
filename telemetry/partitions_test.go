package telemetry_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// The isolated partitions of a destination are one count per destination, present
// only while some are isolated.
func TestIsolatedPartitionsGauge(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}, nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	e.publish(orders)
	ps, err := e.reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(6)
	for _, p := range []int{1, 4} {
		for range 5 { // the policy's FailureThreshold
			ps.Complete(p, breaker.Failure)
		}
	}
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	equalSeries(t, "isolated partitions", map[string]float64{"brokerguard.circuit.partitions.isolated{" + d: 2},
		e.collect().matching("brokerguard.circuit.partitions.isolated"))
	ps.Complete(1, breaker.Success)
	ps.Complete(4, breaker.Success)
	equalSeries(t, "isolated partitions", map[string]float64{},
		e.collect().matching("brokerguard.circuit.partitions.isolated"))
}
