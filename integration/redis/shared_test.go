package sharedredis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// transitions collects what an observer is told.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (o *transitions) observe(tr breaker.Transition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, tr.From.String()+">"+tr.To.String()+":"+tr.Reason)
}

func (o *transitions) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// Three replicas' failures open one circuit; every replica rejects with the shared
// deadline; after it exactly one probe is admitted fleet-wide, and its success closes
// the circuit for all, which each replica's observer reports.
func TestReplicasShareOpeningProbeAndClosing(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	var seen [3]transitions
	var rs []*redisstate.Circuit
	for i := range seen {
		rs = append(rs, replicas(t, e, clk, 1, redisstate.WithObserver(seen[i].observe))...)
	}
	for i := range sharedPolicy().FailureThreshold {
		if p := acquire(t, rs[i]); !p.Complete(breaker.Failure) {
			t.Fatalf("replica %d: Complete(Failure) = false", i)
		}
	}
	clk.Advance(time.Second) // MaxStateStaleness: every snapshot is read again
	deadline := reject(t, rs[0]).NotBefore
	for _, c := range rs[1:] {
		if nb := reject(t, c).NotBefore; !nb.Equal(deadline) {
			t.Fatalf("%s: NotBefore %v; want the shared deadline %v", c.Owner(), nb, deadline)
		}
	}
	clk.Set(deadline)
	probe := acquire(t, rs[1])
	if !probe.Probe() {
		t.Fatal("the first call after the deadline is not a probe")
	}
	for _, c := range []*redisstate.Circuit{rs[0], rs[2]} {
		// The later of now+HalfOpenRetryDelay (1s) and the probe's lease expiry (5s).
		if nb := reject(t, c).NotBefore; !nb.Equal(deadline.Add(5 * time.Second)) {
			t.Fatalf("%s: sibling of the probe has NotBefore %v; want the lease's expiry %v", c.Owner(), nb, deadline.Add(5*time.Second))
		}
	}
	if !probe.Complete(breaker.Success) {
		t.Fatal("the probe's success did not count")
	}
	clk.Advance(time.Second)
	for _, c := range rs {
		acquire(t, c).Complete(breaker.Success)
	}
	// Every replica read the record while it was half-open (the two siblings were
	// rejected on it), so each observer reports all three transitions, with the
	// reason the writing replica gave.
	want := []string{"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded"}
	for i := range seen {
		if got := seen[i].list(); !slices.Equal(got, want) {
			t.Errorf("replica %d observed %q; want %q", i, got, want)
		}
	}
}

// A healthy closed circuit sends no command per admission: only the snapshot refresh,
// one script run per replica about every 0.75 × MaxStateStaleness.
func TestHealthyAdmissionsSendNoCommands(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	c := replicas(t, e, clk, 1)[0]
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
	clk.Advance(750 * time.Millisecond) // three quarters of MaxStateStaleness
	for range 100 {
		acquire(t, c).Complete(breaker.Success)
	}
	if got := e.cmds.sent.Load() - before; got < 1 || got > 2 { // EVALSHA (+ EVAL once if the script was flushed)
		t.Fatalf("after the snapshot aged, %d commands; want one refresh", got)
	}
}

// A permit of an older generation, or completed twice, changes nothing.
func TestCompletionsAreGenerationFenced(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 2)
	late := acquire(t, rs[0])
	for range sharedPolicy().FailureThreshold {
		acquire(t, rs[1]).Complete(breaker.Failure)
	}
	clk.Advance(10 * time.Second)
	probe := acquire(t, rs[1])
	if !probe.Probe() || !probe.Complete(breaker.Success) {
		t.Fatal("the probe was not admitted or its success did not count")
	}
	if late.Complete(breaker.Failure) {
		t.Fatal("a permit of the generation before the opening counted its failure")
	}
	if probe.Complete(breaker.Failure) {
		t.Fatal("a permit completed twice counted the second time")
	}
	clk.Advance(time.Second)
	if s := (acquire(t, rs[0])); !s.Complete(breaker.Success) {
		t.Fatal("the closed circuit's next permit did not count")
	}
	if snap := rs[0].Snapshot(); snap.State != breaker.Closed || snap.Failures != 0 {
		t.Fatalf("snapshot %+v; want closed with no failures", snap)
	}
}

// A probe whose holder vanished frees its slot when its lease expires, and its late
// outcome is stale.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 2)
	for range sharedPolicy().FailureThreshold {
		acquire(t, rs[0]).Complete(breaker.Failure)
	}
	clk.Advance(10 * time.Second)
	lost := acquire(t, rs[0])
	reject(t, rs[1])
	clk.Advance(5 * time.Second) // ProbeLease
	taken := acquire(t, rs[1])
	if !taken.Probe() {
		t.Fatal("the expired lease was not taken over by a probe")
	}
	if lost.Complete(breaker.Failure) {
		t.Fatal("the outcome of an expired lease counted")
	}
	if !taken.Complete(breaker.Success) {
		t.Fatal("the new probe's success did not count")
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

// An operator's hold reaches every replica within MaxStateStaleness and ends by itself.
func TestOverrideReachesTheFleetAndExpires(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 2)
	acquire(t, rs[1]).Complete(breaker.Success)
	until := clk.Now().Add(time.Minute)
	if err := rs[0].ForceOpen(t.Context(), until); err != nil {
		t.Fatal(err)
	}
	reject(t, rs[0])
	clk.Advance(time.Second)
	if nb := reject(t, rs[1]).NotBefore; !nb.Equal(until) {
		t.Fatalf("the other replica's NotBefore %v; want the hold's end %v", nb, until)
	}
	if s := rs[1].Snapshot(); s.Override != breaker.ForcedOpen {
		t.Fatalf("the other replica's snapshot shows override %v; want forced-open", s.Override)
	}
	clk.Set(until)
	if p := acquire(t, rs[1]); !p.Probe() || !p.Complete(breaker.Success) {
		t.Fatal("the first call after the hold is not a probe, or its success did not count")
	}
	if err := rs[0].ForceClose(t.Context(), clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if acquire(t, rs[0]).Complete(breaker.Failure) {
			t.Fatal("a failure counted under ForceClose")
		}
	}
	if err := rs[0].ClearOverride(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !acquire(t, rs[0]).Complete(breaker.Failure) {
		t.Fatal("a failure after ClearOverride did not count")
	}
}

// Deleting a circuit's key (or its expiry) resets it to closed in a new generation:
// permits from before are stale.
func TestDeletedKeyStartsANewGeneration(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	c := replicas(t, e, clk, 1)[0]
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
	reg, err := registry.New(sharedPolicy(),
		registry.WithOverride("kafka:audit", local),
		registry.WithCircuitFactory(breaker.SharedDependency, redisstate.Factory(e.client,
			redisstate.WithKeyPrefix(e.prefix), redisstate.WithIdentityPrefix("billing/"), redisstate.WithClock(clk))))
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
		{"zero staleness", sharedPolicy(), []redisstate.Option{redisstate.WithMaxStateStaleness(0)}},
		{"tiny TTL", sharedPolicy(), []redisstate.Option{redisstate.WithTTL(time.Millisecond)}},
		{"nil clock", sharedPolicy(), []redisstate.Option{redisstate.WithClock(nil)}},
	} {
		if _, err := redisstate.New(e.client, identity, c.p, c.opts...); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		}
	}
	if _, err := redisstate.New(e.client, "", sharedPolicy()); err == nil {
		t.Error("empty identity: New succeeded")
	}
}
