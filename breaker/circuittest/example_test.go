package circuittest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// A backend's test runs both suites: the driver's contract, and the contract of the
// circuits built on it with several replicas on one state.
func Example() {
	_ = func(t *testing.T) {
		var store *circuittest.MemoryDriver // a backend uses its own driver here
		circuittest.TestDriver(t, func(*testing.T) sharedstate.Driver { return &circuittest.MemoryDriver{} })
		circuittest.Run(t, circuittest.Backend{
			Scope:        breaker.SharedDependency,
			Shared:       true,
			MaxStaleness: time.Second,
			Break: func(broken bool) {
				if broken {
					store.Down(errors.New("the store is unreachable"))
				} else {
					store.Down(nil)
				}
			},
			NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
				store = &circuittest.MemoryDriver{}
				return func(cfg circuittest.Config) (circuittest.Circuit, error) {
					c := sharedstate.Config{Identity: "kafka:orders", Policy: cfg.Policy, Scope: breaker.SharedDependency,
						Driver: store, Clock: cfg.Clock, MaxStaleness: time.Second}
					if cfg.Observer != nil {
						c.Observers = append(c.Observers, cfg.Observer)
					}
					return sharedstate.New(c)
				}
			},
		})
	}
}
