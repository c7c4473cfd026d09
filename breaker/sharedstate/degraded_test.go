package sharedstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

func newFaultCircuit(t *testing.T, store sharedstate.Driver, clock *fakeclock.Clock, mode sharedstate.StoreFailure) *sharedstate.Circuit {
	t.Helper()
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
		Policy: breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: 10 * time.Second},
		Driver: store, Clock: clock, MaxStaleness: time.Second, RetryDelay: time.Second, OnStoreFailure: mode})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Under FailClosed a refused write refuses every call for RetryDelay, with
// ErrUnavailable, even on a fresh closed snapshot; the refused failure is not kept.
// After RetryDelay the store is tried again.
func TestFailClosedRefusesCallsAfterARefusedWrite(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	c := newFaultCircuit(t, store, clock, sharedstate.FailClosed)
	ctx := context.Background()
	p, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.RefuseWrites(errOOM)
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure the store refused counted under FailClosed")
	}
	if _, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrUnavailable) || !errors.Is(err, errOOM) {
		t.Fatalf("Acquire after a refused write under FailClosed: %v; want ErrUnavailable caused by the refusal", err)
	}
	if s := c.Snapshot(); s.DegradedSince.IsZero() || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want degraded with no failures kept", s)
	}
	store.RefuseWrites(nil)
	clock.Advance(time.Second)
	p, err = c.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after RetryDelay with writes taken again: %v", err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("a failure the store took did not count")
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() || s.Failures != 1 {
		t.Fatalf("snapshot %+v; want 1 failure, not degraded", s)
	}
}

// A store restored from an older copy (an earlier generation) is repaired by a
// replica that knew the circuit open; a tombstone (a record removed on purpose) is
// not: the circuit starts afresh.
func TestOlderRecordIsRepairedAndTombstoneIsNot(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	c := newFaultCircuit(t, store, clock, sharedstate.KeepLocal)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	backup, _ := store.Load(ctx, "kafka:orders")
	for range 3 {
		p, err := c.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	until := c.Snapshot().NotBefore
	store.Set("kafka:orders", backup) // closed, an earlier generation
	clock.Advance(time.Second)
	if _, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Acquire over a restored older record: %v; want the open circuit kept", err)
	}
	if r, _ := store.Load(ctx, "kafka:orders"); r.State != breaker.Open || r.OpenUntil != until.UnixNano() || r.Generation <= backup.Generation {
		t.Fatalf("stored %+v; want the open state written back, deadline %v, past generation %d", r, until, backup.Generation)
	}
	cur, _ := store.Load(ctx, "kafka:orders")
	store.Set("kafka:orders", sharedstate.Tombstone(cur.Version, clock.Now().UnixNano()))
	clock.Advance(time.Second)
	p, err := c.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after a tombstone: %v; want a fresh closed circuit", err)
	}
	p.Complete(breaker.Success)
	if r, _ := store.Load(ctx, "kafka:orders"); r.State != breaker.Closed || r.Reason != sharedstate.ReasonCleared || r.Generation <= cur.Generation {
		t.Fatalf("stored %+v after a tombstone; want a new closed generation", r)
	}
}
