package sharedstate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// TestOperatorHoldsAReplicasCircuit drives a replica's circuit with the Operator, which
// knows no policy: it reads the opened circuit, holds it closed and clears the hold,
// and the replica follows each step within MaxStaleness and tells its observer.
func TestOperatorHoldsAReplicasCircuit(t *testing.T) {
	const id, staleness = "billing/kafka:orders", time.Second
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	var obs transitions
	c, err := sharedstate.New(sharedstate.Config{
		Identity: id, Scope: breaker.SharedDependency, Driver: store, Clock: clk,
		Policy:       breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Scope: breaker.SharedDependency},
		MaxStaleness: staleness, RetryDelay: -1, Observers: []func(breaker.Transition){obs.observe},
	})
	if err != nil {
		t.Fatal(err)
	}
	op := &sharedstate.Operator{Driver: store, Scope: breaker.SharedDependency, Clock: clk}

	if _, err := op.Status(ctx, id); !errors.Is(err, sharedstate.ErrNotFound) {
		t.Fatalf("Status before any replica used the circuit = %v; want ErrNotFound", err)
	}
	if _, err := op.ForceClose(ctx, id, clk.Now().Add(time.Minute)); !errors.Is(err, sharedstate.ErrNotFound) {
		t.Fatalf("ForceClose of a circuit without a record = %v; want ErrNotFound", err)
	}

	fail := func() {
		t.Helper()
		p, err := c.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	fail()
	fail()
	opened := clk.Now()
	st, err := op.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != breaker.Open || st.Failures != 2 || !st.NotBefore.Equal(opened.Add(time.Minute)) ||
		st.Generation != c.Snapshot().Generation || st.Record.Reason != breaker.ReasonFailureThreshold ||
		st.Scope != breaker.SharedDependency || st.Identity != id {
		t.Fatalf("Status of the opened circuit = %+v", st)
	}

	until := clk.Now().Add(10 * time.Minute)
	held, err := op.ForceClose(ctx, id, until)
	if err != nil {
		t.Fatal(err)
	}
	if held.State != breaker.Closed || held.Override != breaker.ForcedClosed || !held.OverrideUntil.Equal(until) ||
		held.Generation <= st.Generation || held.Record.Fingerprint != st.Record.Fingerprint {
		t.Fatalf("after ForceClose: %+v (before: %+v)", held, st)
	}
	// The replica's open snapshot decides until it is stale; then it reads the hold.
	if _, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Acquire on a fresh open snapshot = %v; want ErrOpen", err)
	}
	clk.Advance(staleness)
	p, err := c.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire within MaxStaleness of the operator's ForceClose: %v", err)
	}
	p.Complete(breaker.Failure) // counts for nothing under the hold
	fail()
	if s := c.Snapshot(); s.State != breaker.Closed || s.Override != breaker.ForcedClosed || s.Generation != held.Generation {
		t.Fatalf("the replica under the operator's hold: %+v", s)
	}
	if tr := obs.last(); tr.From != breaker.Open || tr.To != breaker.Closed || tr.Reason != breaker.ReasonForcedClosed ||
		tr.Generation != held.Generation {
		t.Fatalf("the replica's observer was told %+v", tr)
	}

	cleared, err := op.ClearOverride(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if cleared.State != breaker.Closed || cleared.Override != breaker.NoOverride || cleared.Failures != 0 ||
		cleared.Generation <= held.Generation || cleared.Record.Reason != breaker.ReasonOverrideCleared {
		t.Fatalf("after ClearOverride: %+v", cleared)
	}
	again, err := op.ClearOverride(ctx, id)
	if err != nil || again.Record.Version != cleared.Record.Version {
		t.Fatalf("a second ClearOverride wrote (version %d, was %d): %v", again.Record.Version, cleared.Record.Version, err)
	}
	// Back under its state machine: two failures open it again.
	clk.Advance(staleness)
	fail()
	fail()
	if s := c.Snapshot(); s.State != breaker.Open || s.Override != breaker.NoOverride {
		t.Fatalf("after the hold was cleared, two failures left %+v", s)
	}
	if tr := obs.last(); tr.To != breaker.Open || tr.Reason != breaker.ReasonFailureThreshold {
		t.Fatalf("the replica's observer was last told %+v", tr)
	}

	forced, err := op.ForceOpen(ctx, id, clk.Now().Add(time.Hour))
	if err != nil || forced.State != breaker.Open || forced.Override != breaker.ForcedOpen {
		t.Fatalf("ForceOpen: %+v, %v", forced, err)
	}
	if cleared, err := op.ClearOverride(ctx, id); err != nil || cleared.State != breaker.HalfOpen {
		t.Fatalf("a cleared ForceOpen: %+v, %v; want half-open", cleared, err)
	}
}

// TestOperatorWritesWhatTheCircuitWrites applies each hold through a circuit and
// through an Operator to the same record in two stores: the records written must be
// the same, since both apply the engine's one piece of override logic.
func TestOperatorWritesWhatTheCircuitWrites(t *testing.T) {
	const id = "kafka:orders"
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	viaCircuit, viaOperator := &circuittest.MemoryDriver{}, &circuittest.MemoryDriver{}
	c, err := sharedstate.New(sharedstate.Config{
		Identity: id, Scope: breaker.SharedDependency, Driver: viaCircuit, Clock: clk,
		Policy: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	start, err := viaCircuit.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := viaOperator.Replace(ctx, id, 0, start); err != nil {
		t.Fatal(err)
	}
	op := &sharedstate.Operator{Driver: viaOperator, Clock: clk}
	until := clk.Now().Add(5 * time.Minute)
	for _, step := range []struct {
		name     string
		circuit  func() error
		operator func() (sharedstate.Status, error)
	}{
		{"ForceOpen", func() error { return c.ForceOpen(ctx, until) },
			func() (sharedstate.Status, error) { return op.ForceOpen(ctx, id, until) }},
		{"ForceClose", func() error { return c.ForceClose(ctx, until) },
			func() (sharedstate.Status, error) { return op.ForceClose(ctx, id, until) }},
		{"ClearOverride", func() error { return c.ClearOverride(ctx) },
			func() (sharedstate.Status, error) { return op.ClearOverride(ctx, id) }},
	} {
		clk.Advance(time.Second)
		if err := step.circuit(); err != nil {
			t.Fatalf("%s through the circuit: %v", step.name, err)
		}
		st, err := step.operator()
		if err != nil {
			t.Fatalf("%s through the operator: %v", step.name, err)
		}
		a, _ := viaCircuit.Load(ctx, id)
		b, _ := viaOperator.Load(ctx, id)
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(b, st.Record) {
			t.Fatalf("%s: the circuit wrote %+v, the operator %+v (returned %+v)", step.name, a, b, st.Record)
		}
	}
}

// TestOperatorRefusesACorruptRecord: a record no engine could have written is
// reported, and not overwritten.
func TestOperatorRefusesACorruptRecord(t *testing.T) {
	ctx := context.Background()
	store := &circuittest.MemoryDriver{}
	bad := circuittest.SampleRecords()[0]
	bad.Generation = 0
	if err := store.Replace(ctx, "kafka:orders", 0, bad); err != nil {
		t.Fatal(err)
	}
	op := &sharedstate.Operator{Driver: store}
	if _, err := op.Status(ctx, "kafka:orders"); !errors.Is(err, sharedstate.ErrCorrupt) {
		t.Fatalf("Status of a corrupt record = %v; want ErrCorrupt", err)
	}
	if _, err := op.ForceOpen(ctx, "kafka:orders", time.Now().Add(time.Minute)); !errors.Is(err, sharedstate.ErrCorrupt) {
		t.Fatalf("ForceOpen over a corrupt record = %v; want ErrCorrupt", err)
	}
	if got, _ := store.Load(ctx, "kafka:orders"); !reflect.DeepEqual(got, bad) {
		t.Fatalf("the corrupt record was overwritten: %+v", got)
	}
	store.Down(errDown)
	if _, err := op.Status(ctx, "kafka:orders"); !errors.Is(err, errDown) {
		t.Fatalf("Status with the store down = %v", err)
	}
	store.Down(nil)
	loadReplace := struct{ sharedstate.Driver }{store} // only the Driver's methods
	if err := (&sharedstate.Operator{Driver: loadReplace}).List(ctx, "", func(string) error { return nil }); !errors.Is(err, sharedstate.ErrNotListable) {
		t.Fatalf("List on a driver that cannot list = %v; want ErrNotListable", err)
	}
}

// How an operator's hold reports a store that refuses or keeps changing, and
// ComparePolicies.

// operatorOver returns an Operator over h, whose circuit "kafka:orders" exists.
func operatorOver(t *testing.T, h *flakyDriver, clock *fakeclock.Clock) *sharedstate.Operator {
	t.Helper()
	if err := ruleCircuit(t, h, clock, nil).Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &sharedstate.Operator{Driver: h, Clock: clock}
}

// A hold whose write fails with a store error returns that error after one attempt.
func TestOperatorHoldReturnsAStoreErrorAtOnce(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	op := operatorOver(t, h, clock)
	h.m.RefuseWrites(errOOM)
	_, before := h.counts()
	if _, err := op.ForceOpen(context.Background(), "kafka:orders", clock.Now().Add(time.Minute)); !errors.Is(err, errOOM) {
		t.Fatalf("ForceOpen over a store refusing writes: %v; want the refusal", err)
	}
	if _, after := h.counts(); after-before != 1 {
		t.Fatalf("%d writes tried; want 1 (a store error is no conflict to retry)", after-before)
	}
}

// A hold whose writes keep conflicting gives up with an error naming the circuit.
func TestOperatorHoldUnderContentionNamesTheCircuit(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	op := operatorOver(t, h, clock)
	h.mu.Lock()
	h.conflict = true
	h.mu.Unlock()
	_, err := op.ForceClose(context.Background(), "kafka:orders", clock.Now().Add(time.Minute))
	if err == nil || errors.Is(err, sharedstate.ErrConflict) || !strings.Contains(err.Error(), `circuit "kafka:orders"`) {
		t.Fatalf("ForceClose under contention: %v; want an error naming the circuit", err)
	}
}

// ComparePolicies accepts the same policy and names a difference in any other.
func TestComparePoliciesSameAndDifferent(t *testing.T) {
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Minute}
	if err := sharedstate.ComparePolicies("kafka:orders", p, p); err != nil {
		t.Fatalf("the same policy: %v; want nil", err)
	}
	q := p
	q.FailureThreshold = 4
	if err := sharedstate.ComparePolicies("kafka:orders", p, q); !errors.Is(err, sharedstate.ErrPolicyMismatch) {
		t.Fatalf("another threshold: %v; want a mismatch", err)
	}
}

// An Operator without MaxHold bounds holds by DefaultMaxHold; a negative MaxHold sets
// no bound.
func TestOperatorDefaultMaxHold(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	op := operatorOver(t, newFlakyDriver(), clock)
	ctx := context.Background()
	var he *backend.HoldError
	if _, err := op.ForceOpen(ctx, "kafka:orders", clock.Now().Add(sharedstate.DefaultMaxHold+time.Second)); !errors.As(err, &he) {
		t.Fatalf("a hold past DefaultMaxHold with MaxHold unset: %v; want a *HoldError", err)
	}
	if _, err := op.ForceOpen(ctx, "kafka:orders", clock.Now().Add(sharedstate.DefaultMaxHold)); err != nil {
		t.Fatalf("a hold of exactly DefaultMaxHold: %v", err)
	}
	op.MaxHold = -1
	if _, err := op.ForceOpen(ctx, "kafka:orders", clock.Now().Add(sharedstate.DefaultMaxHold+time.Hour)); err != nil {
		t.Fatalf("a long hold with a negative MaxHold: %v", err)
	}
}
