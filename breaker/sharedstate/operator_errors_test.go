package sharedstate_test

// How an operator's hold reports a store that refuses or keeps changing, and
// ComparePolicies (issue 33: not reached by this package's tests).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esOperatorOver returns an Operator over h, whose circuit "kafka:orders" exists.
func esOperatorOver(t *testing.T, h *esHooked, clock *fakeclock.Clock) *sharedstate.Operator {
	t.Helper()
	if err := ruleCircuit(t, h, clock, nil).Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &sharedstate.Operator{Driver: h, Clock: clock}
}

// A hold whose write fails with a store error returns that error after one attempt.
func TestOperatorHoldReturnsAStoreErrorAtOnce(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := esNewHooked()
	op := esOperatorOver(t, h, clock)
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
	h := esNewHooked()
	op := esOperatorOver(t, h, clock)
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
	op := esOperatorOver(t, esNewHooked(), clock)
	ctx := context.Background()
	var he *breaker.HoldError
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
