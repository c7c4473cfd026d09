package dynamo

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// The engine and the item codec on the in-memory table (the same suite runs on
// dynalite in integration/dynamo).
func TestConformance(t *testing.T) {
	var st *memStore
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SharedDependency,
		Shared:       true,
		MaxStaleness: DefaultMaxStateStaleness,
		Break: func(broken bool) {
			if broken {
				st.setDown(errDown)
			} else {
				st.setDown(nil)
			}
		},
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			st = newMemStore()
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				opts := []Option{WithClock(cfg.Clock), WithBackendRetryDelay(time.Millisecond)}
				if cfg.Observer != nil {
					opts = append(opts, WithObserver(cfg.Observer))
				}
				return newCircuit(st, testTable, testID, cfg.Policy, opts...)
			}
		},
	})
}

func TestDriverContract(t *testing.T) {
	circuittest.TestDriver(t, func(*testing.T) sharedstate.Driver { return newMemStore() })
}
