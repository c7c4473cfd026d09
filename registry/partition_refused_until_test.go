package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
)

// RefusedUntil says until when Admit refuses a partition: the isolation's end, then
// nothing while its probe is due, a second while a probe is out, and nothing again
// once that probe is given up (an isolation's length after it was taken).
func TestRefusedUntilFollowsTheIsolationAndItsProbe(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 6)
	if ps.AnyIsolated() {
		t.Fatal("AnyIsolated before any failure")
	}
	if u := ps.RefusedUntil(4); !u.IsZero() {
		t.Fatalf("RefusedUntil of a partition never called: %v", u)
	}
	ps.Complete(1, breaker.Failure) // a slot, not isolated
	if u := ps.RefusedUntil(1); !u.IsZero() {
		t.Fatalf("RefusedUntil of a partition with one failure: %v", u)
	}
	failN(ps, 2, 3)
	if !ps.AnyIsolated() {
		t.Fatal("AnyIsolated false with partition 2 isolated")
	}
	if u := ps.RefusedUntil(2); !u.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("RefusedUntil(2) = %v, want the isolation's end", u)
	}
	err := ps.Admit(2)
	pe, ok := errors.AsType[*registry.PartitionRejectedError](err)
	if !ok || pe.Error() != "registry: publish to kafka:orders partition 2 rejected: "+pe.Err.Error() {
		t.Fatalf("Admit(2) = %v", err)
	}
	clock.Advance(10 * time.Second)
	if u := ps.RefusedUntil(2); !u.IsZero() {
		t.Fatalf("RefusedUntil(2) with its probe due: %v", u)
	}
	if err := ps.Admit(2); err != nil { // takes the probe
		t.Fatal(err)
	}
	if u := ps.RefusedUntil(2); !u.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("RefusedUntil(2) with its probe out: %v, want a second from now", u)
	}
	clock.Advance(10*time.Second - time.Nanosecond)
	if u := ps.RefusedUntil(2); !u.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("RefusedUntil(2) just before the probe is given up: %v", u)
	}
	clock.Advance(time.Nanosecond)
	if u := ps.RefusedUntil(2); !u.IsZero() {
		t.Fatalf("RefusedUntil(2) once the probe is given up: %v", u)
	}
}

// When no partition answers, none is refused: RefusedUntil is zero.
func TestRefusedUntilWhenEveryPartitionIsIsolated(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitions(t, clock, 1)
	failN(ps, 0, 3)
	if u := ps.RefusedUntil(0); !u.IsZero() || ps.Admit(0) != nil {
		t.Fatalf("the only partition isolated: RefusedUntil %v, Admit %v; want neither refusing", u, ps.Admit(0))
	}
}
