package sharedstate_test

// A slow read does not undo a newer closed record (circuit.go: install). Amnesia
// repair (amnesia.go) rereads the store when a read finds a record older than an open
// snapshot; over a closed snapshot only install's rule keeps the newer view.

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A read that found the circuit open answers after the replica wrote a ForceClose: the
// replica keeps admitting, and its observers never see the generation go back.
func TestSlowReadDoesNotUndoTheReplicasForceClose(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	store := &circuittest.MemoryDriver{}
	slow := &heldLoad{MemoryDriver: store, read: make(chan struct{}), released: make(chan struct{})}
	var seen transitions
	c := ruleCircuit(t, slow, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.FailureThreshold = 1
		cfg.Observers = []func(breaker.Transition){seen.observe}
	})
	other := ruleCircuit(t, store, clock, func(cfg *sharedstate.Config) { cfg.Policy.FailureThreshold = 1 })
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	esAcquire(t, other).Complete(breaker.Failure) // the other replica opens the circuit

	slow.mu.Lock()
	slow.armed = true
	slow.mu.Unlock()
	done := make(chan error)
	go func() { done <- c.Refresh(ctx) }() // reads the open record
	<-slow.read

	if err := c.ForceClose(ctx, clock.Now().Add(10*time.Minute)); err != nil { // reads and writes
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Override != breaker.ForcedClosed {
		t.Fatalf("after ForceClose: %v %v; want closed by the operator", s.State, s.Override)
	}
	close(slow.released)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Override != breaker.ForcedClosed {
		t.Errorf("the slow read's open record replaced the replica's newer ForceClose: %v %v", s.State, s.Override)
	}
	if ok, err := csAdmitted(c); !ok {
		t.Errorf("Acquire on a circuit the replica saw force-closed: %v; want admitted", err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i := 1; i < len(seen.seen); i++ {
		if seen.seen[i].Generation <= seen.seen[i-1].Generation {
			t.Errorf("observer saw generation %d after %d: %+v", seen.seen[i].Generation, seen.seen[i-1].Generation, seen.seen)
		}
	}
}
