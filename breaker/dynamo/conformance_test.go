package dynamo

import (
	"errors"
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
		MaxStaleness: sharedstate.DefaultMaxStaleness,
		Break: func(broken bool) {
			if broken {
				st.setDown(errDown)
			} else {
				st.setDown(nil)
			}
		},
		RefuseWrites: func(refuse bool) {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.refuse = nil
			if refuse {
				st.refuse = errThrottled
			}
		},
		Forget: func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			clear(st.items)
		},
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			st = newMemStore()
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				opts := []Option{sharedstate.WithClock(cfg.Clock), sharedstate.WithRetryDelay(time.Millisecond)}
				if cfg.Observer != nil {
					opts = append(opts, sharedstate.WithObserver(cfg.Observer))
				}
				return newCircuit(st, testTable, testID, cfg.Policy, opts...)
			}
		},
	})
}

// errThrottled stands for a write DynamoDB refused (a throttle).
var errThrottled = errors.New("ProvisionedThroughputExceededException: the level of configured provisioned throughput for the table was exceeded")

func TestDriverContract(t *testing.T) {
	circuittest.TestDriver(t, func(*testing.T) sharedstate.Driver { return newMemStore() })
}
