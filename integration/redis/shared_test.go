package sharedredis

// The contract every backend keeps runs in conformance_test.go; the tests here are
// about Redis: commands sent, keys, corrupt fields, refusals and the registry.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A healthy closed circuit sends no command per admission: only the snapshot refresh,
// one script run per replica about every 0.75 × MaxStaleness.
func TestHealthyAdmissionsSendNoCommands(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	c := newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk))
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := e.cmds.sent.Load()
	for range 10_000 {
		acquire(t, c).Complete(breaker.Success)
	}
	if got := e.cmds.sent.Load() - before; got != 0 {
		t.Fatalf("10,000 healthy admissions sent %d Redis commands; want 0", got)
	}
	clk.Advance(750 * time.Millisecond) // three quarters of MaxStaleness
	for range 100 {
		acquire(t, c).Complete(breaker.Success)
	}
	if got := e.cmds.sent.Load() - before; got < 1 || got > 2 { // EVALSHA (+ EVAL once if the script was flushed)
		t.Fatalf("after the snapshot aged, %d commands; want one refresh", got)
	}
}

func TestPolicyMismatchIsRefused(t *testing.T) {
	e := setup(t)
	a := newCircuit(t, e, sharedPolicy())
	if err := a.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := sharedPolicy()
	other.FailureThreshold = 4
	b := newCircuit(t, e, other)
	err := b.Refresh(t.Context())
	var pm *sharedstate.PolicyMismatchError
	var ue *redisstate.UnavailableError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &pm) || !errors.As(err, &ue) || ue.Key != b.Key() {
		t.Fatalf("Refresh under another policy = %v; want ErrUnavailable with a *PolicyMismatchError", err)
	}
	if _, err := b.Acquire(t.Context()); !errors.Is(err, sharedstate.ErrPolicyMismatch) {
		t.Fatalf("Acquire under another policy = %v; want a refusal", err)
	}
}

// Deleting a circuit's key (or its expiry) resets it to closed in a new generation:
// permits from before are stale.
func TestDeletedKeyStartsANewGeneration(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	c := newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk))
	old := acquire(t, c)
	gen := old.Generation()
	for range 2 {
		acquire(t, c).Complete(breaker.Failure)
	}
	if err := e.client.Del(t.Context(), c.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	p := acquire(t, c)
	if p.Generation() == gen {
		t.Fatalf("the re-created record kept generation %d", gen)
	}
	if old.Complete(breaker.Failure) {
		t.Fatal("a permit from before the deletion counted")
	}
	p.Complete(breaker.Success)
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want closed with no failures", s)
	}
	ttl, err := e.client.PTTL(t.Context(), c.Key()).Result()
	if err != nil || ttl <= 23*time.Hour {
		t.Fatalf("the re-created key's TTL = %v, %v; want the default 24 hours", ttl, err)
	}
}

func TestCorruptRecordFailsClosed(t *testing.T) {
	e := setup(t)
	c := newCircuit(t, e, sharedPolicy())
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.HSet(t.Context(), c.Key(), "generation", "7").Err(); err != nil {
		t.Fatal(err)
	}
	d := newCircuit(t, e, sharedPolicy())
	err := d.Refresh(t.Context())
	var re *redisstate.RecordError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &re) || re.Field != "generation" {
		t.Fatalf("Refresh of a corrupt key = %v; want ErrUnavailable naming the field generation", err)
	}
}

// publisherFunc adapts a function to transport.Publisher.
type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}

func TestRegistryUsesRedisForSharedPolicies(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	local := sharedPolicy()
	local.Scope = breaker.LocalProcess
	reg, err := registry.New(registry.Policy{Circuit: sharedPolicy()},
		registry.WithOverride("kafka:audit", registry.Policy{Circuit: local}),
		registry.WithCircuitFactory(breaker.SharedDependency, redisstate.Factory(e.client,
			redisstate.WithKeyPrefix(e.prefix), sharedstate.WithIdentityPrefix("billing/"), sharedstate.WithClock(clk))))
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("broker down")
	pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return down }), nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	for range 3 {
		if err := pub.Publish(t.Context(), orders, transport.Message{Value: []byte("x")}); !errors.Is(err, down) {
			t.Fatalf("Publish = %v; want the broker's error", err)
		}
	}
	if err := pub.Publish(t.Context(), orders, transport.Message{Value: []byte("x")}); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Publish after 3 failures = %v; want a shared open rejection", err)
	}
	if s := reg.Snapshots()[orders]; s.Scope != breaker.SharedDependency || s.Identity != "billing/kafka:orders" || s.State != breaker.Open {
		t.Fatalf("orders snapshot %+v; want the shared circuit billing/kafka:orders, open", s)
	}
	if n, err := e.client.Exists(t.Context(), e.prefix+"{billing/kafka:orders}").Result(); err != nil || n != 1 {
		t.Fatalf("key %s{billing/kafka:orders} exists: %d, %v; want 1", e.prefix, n, err)
	}
	audit, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if s := audit.Snapshot(); s.Scope != breaker.LocalProcess {
		t.Fatalf("audit circuit scope %v; want a local circuit", s.Scope)
	}
}

func TestNewRefusesWhatItCannotProvide(t *testing.T) {
	e := setup(t)
	for _, c := range []struct {
		name string
		p    breaker.Policy
		opts []redisstate.Option
	}{
		{"local scope", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, nil},
		{"window mode", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, FailureWindow: time.Minute, Scope: breaker.SharedDependency}, nil},
		{"negative staleness", sharedPolicy(), []redisstate.Option{sharedstate.WithMaxStaleness(-time.Second)}},
		{"another backend's option", sharedPolicy(), []redisstate.Option{sharedstate.DriverOption(func(*struct{}) error { return nil })}},
		{"tiny TTL", sharedPolicy(), []redisstate.Option{redisstate.WithTTL(time.Millisecond)}},
		{"nil clock", sharedPolicy(), []redisstate.Option{sharedstate.WithClock(nil)}},
		{"nil random", sharedPolicy(), []redisstate.Option{sharedstate.WithRandom(nil)}},
	} {
		if _, err := redisstate.New(e.client, identity, c.p, c.opts...); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		}
	}
	if _, err := redisstate.New(e.client, "", sharedPolicy()); err == nil {
		t.Error("empty identity: New succeeded")
	}
}
