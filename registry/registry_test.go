package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	policy  = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}}
	orders  = transport.Destination{Broker: "kafka", Name: "orders"}
	refunds = transport.Destination{Broker: "kafka", Name: "refunds"}
)

func newRegistry(t *testing.T, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.New(policy, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fail(t *testing.T, c breaker.Circuit) {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Failure)
}

func TestOneStableCircuitPerDestination(t *testing.T) {
	r := newRegistry(t)
	a, _ := r.Circuit(orders)
	b, _ := r.Circuit(transport.Destination{Broker: "kafka", Name: "orders"})
	c, _ := r.Circuit(refunds)
	if a != b {
		t.Fatal("two circuits for one destination")
	}
	if a == c {
		t.Fatal("two destinations share a circuit")
	}
	if r.Len() != 2 {
		t.Fatalf("Len %d", r.Len())
	}
}

func TestOverridesApplyToTheExactDestination(t *testing.T) {
	strict := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: strict}))
	o, _ := r.Circuit(orders)
	fail(t, o)
	if o.Snapshot().State != breaker.Open {
		t.Fatal("the override's threshold of 1 was not applied")
	}
	f, _ := r.Circuit(refunds)
	fail(t, f)
	if f.Snapshot().State != breaker.Closed {
		t.Fatal("the override leaked to another destination")
	}
	if r.Policy(transport.Destination{Broker: "amqp", Name: "orders"}) != policy {
		t.Fatal("an override matched a destination of another broker")
	}
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaults registry.Policy
		opts     []registry.Option
		want     string
	}{
		{"bad default", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1}}, nil, "registry: default policy: Circuit: breaker: invalid policy: BreakDuration"},
		{"bad default admission", registry.Policy{Circuit: policy.Circuit, Admission: admission.Policy{Limit: admission.LimitPolicy{Max: -1}}}, nil,
			"registry: default policy: Admission: admission: invalid policy: Limit.Max"},
		{"negative budget", registry.Policy{Circuit: policy.Circuit, MinCallBudget: -1}, nil, "registry: default policy: MinCallBudget must not be negative"},
		{"bad override admission", policy, []registry.Option{registry.WithOverride("kafka:x", registry.Policy{Circuit: policy.Circuit,
			Admission: admission.Policy{Limit: admission.LimitPolicy{Max: 1, Min: 2}}})}, `registry: override "kafka:x": Admission: admission: invalid policy: Limit.Min`},
		{"bad override key", policy, []registry.Option{registry.WithOverride("orders", policy)}, `registry: override "orders": transport: invalid destination`},
		{"bad override policy", policy, []registry.Option{registry.WithOverride("kafka:x", registry.Policy{Circuit: breaker.Policy{Jitter: 2}})}, `registry: override "kafka:x": Circuit: breaker: invalid policy: Jitter`},
		{"shared scope without factory", policy, []registry.Option{registry.WithOverride("kafka:x", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: 1, Scope: breaker.SharedDependency}})}, "registry: policy for kafka:x has scope SHARED_DEPENDENCY but no circuit factory"},
		{"zero cap", policy, []registry.Option{registry.WithMaxDestinations(0)}, "registry: WithMaxDestinations(0)"},
		{"zero idle", policy, []registry.Option{registry.WithIdleEviction(0)}, "registry: WithIdleEviction(0s)"},
	} {
		_, err := registry.New(tc.defaults, tc.opts...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want prefix %q", tc.name, err, tc.want)
		}
	}
}

func TestInvalidDestinationsAreRefused(t *testing.T) {
	r := newRegistry(t)
	for _, d := range []transport.Destination{{Broker: "kafka"}, {Name: "x"}, {Broker: "kafka", Name: "a\x00b"}} {
		if _, err := r.Circuit(d); !errors.Is(err, transport.ErrInvalidDestination) {
			t.Errorf("%q: %v", d, err)
		}
	}
	if r.Len() != 0 {
		t.Fatalf("invalid destinations made %d circuits", r.Len())
	}
}

func TestCardinalityCap(t *testing.T) {
	r := newRegistry(t, registry.WithMaxDestinations(3))
	for i := range 3 {
		if _, err := r.Circuit(transport.Destination{Broker: "sqs", Name: fmt.Sprint("q", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Circuit(transport.Destination{Broker: "sqs", Name: "q3"})
	if !errors.Is(err, registry.ErrTooManyDestinations) || !strings.Contains(err.Error(), "sqs:q3") {
		t.Fatalf("past the cap: %v", err)
	}
	if _, err := r.Circuit(transport.Destination{Broker: "sqs", Name: "q0"}); err != nil {
		t.Fatalf("an existing destination past the cap: %v", err)
	}
}

func TestIdleEvictionDropsOnlyIdleClosedCircuits(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithIdleEviction(time.Minute), registry.WithMaxDestinations(3))
	idle, _ := r.Circuit(transport.Destination{Broker: "sqs", Name: "idle"})
	open, _ := r.Circuit(transport.Destination{Broker: "sqs", Name: "open"})
	busy := transport.Destination{Broker: "sqs", Name: "busy"}
	r.Circuit(busy)
	fail(t, open)
	fail(t, open)
	if n := r.EvictIdle(); n != 0 { // marks them idle from now
		t.Fatalf("evicted %d circuits that were just used", n)
	}
	clock.Advance(time.Minute)
	r.Circuit(busy) // used since the last sweep
	if n := r.EvictIdle(); n != 1 {
		t.Fatalf("evicted %d, want only the idle closed circuit", n)
	}
	snaps := r.Snapshots()
	if _, ok := snaps[transport.Destination{Broker: "sqs", Name: "idle"}]; ok || len(snaps) != 2 {
		t.Fatalf("snapshots after eviction: %v", snaps)
	}
	again, _ := r.Circuit(transport.Destination{Broker: "sqs", Name: "idle"})
	if again == idle {
		t.Fatal("the evicted circuit came back")
	}
}

func TestEvictionMakesRoomAtTheCap(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithIdleEviction(time.Minute), registry.WithMaxDestinations(1))
	r.Circuit(orders)
	r.EvictIdle()
	clock.Advance(2 * time.Minute)
	if _, err := r.Circuit(refunds); err != nil {
		t.Fatalf("the idle circuit was not evicted to make room: %v", err)
	}
}

func TestAggregates(t *testing.T) {
	r := newRegistry(t)
	a, _ := r.Circuit(orders)
	b, _ := r.Circuit(refunds)
	fail(t, a)
	if r.IsAnyOpen() || r.FailureCount() != 1 {
		t.Fatalf("open %v failures %d", r.IsAnyOpen(), r.FailureCount())
	}
	fail(t, b)
	fail(t, b)
	if !r.IsAnyOpen() || r.FailureCount() != 3 {
		t.Fatalf("open %v failures %d, want true and 3", r.IsAnyOpen(), r.FailureCount())
	}
}

type fakeCircuit struct{ breaker.Circuit }

func TestFactoryMakesSharedScopeCircuits(t *testing.T) {
	shared := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: breaker.SharedDependency}
	var made []string
	r := newRegistry(t,
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: shared}),
		registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
			made = append(made, d.String()+"/"+p.Scope.String())
			if d.Name == "broken" {
				return nil, errors.New("table missing")
			}
			local, err := breaker.New(d.String(), breaker.Policy{})
			return fakeCircuit{local}, err
		}),
		registry.WithOverride("kafka:broken", registry.Policy{Circuit: shared}))
	c, err := r.Circuit(orders)
	if _, ok := c.(fakeCircuit); !ok || err != nil {
		t.Fatalf("Circuit: %T, %v", c, err)
	}
	if c, _ := r.Circuit(refunds); c.(*breaker.Breaker) == nil {
		t.Fatal("local destination not served by the local breaker")
	}
	if _, err := r.Circuit(transport.Destination{Broker: "kafka", Name: "broken"}); err == nil || !strings.Contains(err.Error(), "registry: circuit for kafka:broken: table missing") {
		t.Fatalf("factory error: %v", err)
	}
	if len(made) != 2 || made[0] != "kafka:orders/SHARED_DEPENDENCY" {
		t.Fatalf("factory calls %v", made)
	}
}

func TestObserverNamesTheDestination(t *testing.T) {
	var got []string
	var mu sync.Mutex
	r := newRegistry(t, registry.WithObserver(func(d transport.Destination, tr breaker.Transition) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d.String()+":"+tr.To.String())
	}))
	c, _ := r.Circuit(orders)
	fail(t, c)
	fail(t, c)
	if len(got) != 1 || got[0] != "kafka:orders:open" {
		t.Fatalf("observed %v", got)
	}
}

// A shared circuit made by a factory reports its transitions to the registry's
// observers, as a local one does: telemetry and the admin journal see shared outages.
func TestObserversSeeSharedCircuits(t *testing.T) {
	driver := new(circuittest.MemoryDriver)
	var seen []string
	r := newRegistry(t,
		registry.WithObserver(func(d transport.Destination, tr breaker.Transition) {
			seen = append(seen, d.String()+": "+tr.From.String()+" -> "+tr.To.String())
		}),
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency}}),
		registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
			return sharedstate.New(sharedstate.Config{Identity: d.String(), Policy: p, Scope: breaker.SharedDependency, Driver: driver})
		}))
	c, err := r.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	fail(t, c)
	if len(seen) != 1 || seen[0] != "kafka:orders: closed -> open" {
		t.Fatalf("observer saw %q, want the shared circuit opening", seen)
	}
}

// A factory may hand out the same shared circuit again for a destination the registry
// evicted (filestate.Store keeps one circuit per identity): the registry's observers
// must still see each of its transitions once, or telemetry counts an outage twice.
func TestObserversSeeARecreatedSharedCircuitOnce(t *testing.T) {
	clock := fakeclock.New(time.Unix(0, 0))
	driver := new(circuittest.MemoryDriver)
	made := map[transport.Destination]breaker.Circuit{}
	seen := 0
	r := newRegistry(t, registry.WithClock(clock), registry.WithIdleEviction(time.Minute),
		registry.WithObserver(func(transport.Destination, breaker.Transition) { seen++ }),
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency}}),
		registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
			if c, ok := made[d]; ok {
				return c, nil
			}
			c, err := sharedstate.New(sharedstate.Config{Identity: d.String(), Policy: p, Scope: breaker.SharedDependency, Driver: driver, Clock: clock})
			made[d] = c
			return c, err
		}))
	if _, err := r.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	r.EvictIdle()
	clock.Advance(time.Minute)
	if n := r.EvictIdle(); n != 1 {
		t.Fatalf("evicted %d circuits, want the idle one", n)
	}
	c, err := r.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	fail(t, c)
	if seen != 1 {
		t.Fatalf("observer saw the circuit open %d times, want once", seen)
	}
}
