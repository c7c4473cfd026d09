package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A permit taken before a ForceClose does not count after the override is cleared:
// each override starts a generation of its own, never one seen before.
func TestPermitFromBeforeAForceCloseDoesNotCountAfterIt(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	p := h.acquire()
	h.b.ForceClose(t0.Add(time.Hour))
	h.b.ClearOverride()
	if p.Complete(breaker.Failure) {
		t.Fatal("a permit from before the ForceClose counted")
	}
	if s := h.b.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want closed with no failure", s)
	}
}

// With the system clock, a circuit held closed admits calls with real permits:
// MaxInFlight still applies (the open circuit's lock-free rejection is for the open
// state only).
func TestForceCloseOnTheSystemClockKeepsMaxInFlight(t *testing.T) {
	b, err := breaker.New("test", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.ForceClose(time.Now().Add(time.Hour))
	p, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire under ForceClose: %v", err)
	}
	if s := b.Snapshot(); s.InFlight != 1 {
		t.Fatalf("%d calls in flight, want 1", s.InFlight)
	}
	if _, err := b.Acquire(context.Background()); err == nil {
		t.Fatal("a second call admitted with MaxInFlight 1")
	}
	p.Complete(breaker.Success)
}

// A circuit that recovered starts with an empty window: the failures that opened it
// do not count again.
func TestRecoveryEmptiesTheWindow(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 4, BreakDuration: time.Second,
		FailureWindow: 10 * time.Second, MinimumCalls: 4, FailureRatio: 0.5})
	h.calls(breaker.Failure, 4)
	if s := h.b.Snapshot(); s.State != breaker.Open {
		t.Fatalf("state %v after 4 failures of 4", s.State)
	}
	h.clock.Advance(time.Second)
	h.call(breaker.Success) // the probe closes the circuit
	h.call(breaker.Failure)
	if s := h.b.Snapshot(); s.State != breaker.Closed {
		t.Fatalf("state %v after one failure since the recovery; want closed", s.State)
	}
}
