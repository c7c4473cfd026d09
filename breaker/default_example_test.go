package breaker_test

import (
	"fmt"

	"github.com/brokerguard/brokerguard/breaker"
)

// Start from the recommended policy and change what a destination needs.
func ExampleDefaultPolicy() {
	p := breaker.DefaultPolicy()
	fmt.Println(p.FailureThreshold, p.BreakDuration, p.ProbeLease, p.MaxBreakDuration, p.Jitter)

	payments := breaker.DefaultPolicy()
	payments.FailureThreshold = 2 // open sooner
	fmt.Println(payments.Validate() == nil)

	// A circuit that never opens must say so: registry.New refuses the zero Policy.
	fmt.Println(breaker.DisabledPolicy().Disabled, breaker.Policy{}.Disabled)
	// Output:
	// 5 550ms 10s 0s 0.1
	// true
	// true false
}
