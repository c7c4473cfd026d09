package sharedstate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

var (
	errDown = errors.New("store down")
	errOOM  = errors.New("OOM command not allowed when used memory > 'maxmemory'")
)

// replaceOnly hides the MemoryDriver's Counter, so the engine counts with conditional
// replaces, as over a store without atomic updates.
type replaceOnly struct{ *circuittest.MemoryDriver }

func TestConformance(t *testing.T) {
	for name, wrap := range map[string]func(*circuittest.MemoryDriver) sharedstate.Driver{
		"Counter":     func(m *circuittest.MemoryDriver) sharedstate.Driver { return m },
		"ReplaceOnly": func(m *circuittest.MemoryDriver) sharedstate.Driver { return replaceOnly{m} },
	} {
		t.Run(name, func(t *testing.T) {
			var store *circuittest.MemoryDriver
			circuittest.Run(t, circuittest.Backend{
				Scope:        breaker.SharedDependency,
				Shared:       true,
				MaxStaleness: time.Second,
				Break: func(broken bool) {
					if broken {
						store.Down(errDown)
					} else {
						store.Down(nil)
					}
				},
				RefuseWrites: func(refuse bool) {
					if refuse {
						store.RefuseWrites(errOOM)
					} else {
						store.RefuseWrites(nil)
					}
				},
				Forget: func() { store.Forget() },
				NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
					store = &circuittest.MemoryDriver{}
					return func(cfg circuittest.Config) (circuittest.Circuit, error) {
						cfg2 := sharedstate.Config{Identity: "kafka:orders", Policy: cfg.Policy, Scope: breaker.SharedDependency,
							Driver: wrap(store), Clock: cfg.Clock, MaxStaleness: time.Second, RetryDelay: -1}
						if cfg.Observer != nil {
							cfg2.Observers = append(cfg2.Observers, cfg.Observer)
						}
						return sharedstate.New(cfg2)
					}
				},
			})
		})
	}
}

func TestMemoryDriver(t *testing.T) {
	circuittest.TestDriver(t, func(*testing.T) sharedstate.Driver { return &circuittest.MemoryDriver{} })
}
