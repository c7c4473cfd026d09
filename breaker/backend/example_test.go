package backend_test

import (
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// The share of calls a circuit admits after a probe closed it: linear by default, and
// faster at first with an aggression above 1, as in Envoy's slow start.
func ExampleRampShare() {
	linear := breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, RampDuration: 10 * time.Second}
	eager := linear
	eager.RampAggression = 2
	for _, since := range []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second} {
		fmt.Printf("%v: %.2f %.2f\n", since, backend.RampShare(linear, since), backend.RampShare(eager, since))
	}
	// Output:
	// 0s: 0.10 0.10
	// 2.5s: 0.25 0.50
	// 5s: 0.50 0.71
	// 10s: 1.00 1.00
}
