package sharedstate_test

import (
	"context"
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
// (Embedding the MemoryDriver would promote its Counter methods: the wrapper names
// only the Driver's.)
type replaceOnly struct{ m *circuittest.MemoryDriver }

func (r replaceOnly) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	return r.m.Load(ctx, id)
}

func (r replaceOnly) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	return r.m.Replace(ctx, id, expect, next)
}

func TestReplaceOnlyHidesTheCounter(t *testing.T) {
	if _, counts := any(replaceOnly{}).(sharedstate.Counter); counts {
		t.Fatal("replaceOnly is a Counter: the replace-path tests would run the counter path")
	}
}

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
