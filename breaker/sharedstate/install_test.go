package sharedstate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// heldLoad is a driver whose next Load, once armed, reads the record and then waits
// for release before answering: a slow read overtaken by a later one.
type heldLoad struct {
	*circuittest.MemoryDriver
	mu       sync.Mutex
	armed    bool
	read     chan struct{}
	released chan struct{}
}

func (h *heldLoad) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	r, err := h.MemoryDriver.Load(ctx, id)
	h.mu.Lock()
	hold := h.armed
	h.armed = false
	h.mu.Unlock()
	if hold {
		close(h.read)
		<-h.released
	}
	return r, err
}

// Two reads of one replica overlap, and the later one, which saw the circuit opened by
// another replica, answers first. The earlier read's older record must not replace
// it: the replica would admit calls on a closed circuit it knows is open, and its
// observers would see the generation go back.
func TestSlowReadDoesNotUndoANewerOne(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	slow := &heldLoad{MemoryDriver: store, read: make(chan struct{}), released: make(chan struct{})}
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 1, BreakDuration: time.Minute}
	var seen []breaker.Transition
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
		Driver: slow, Clock: clock, RetryDelay: -1, Observers: []func(breaker.Transition){func(tr breaker.Transition) { seen = append(seen, tr) }}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
		Driver: store, Clock: clock, RetryDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}

	slow.mu.Lock()
	slow.armed = true
	slow.mu.Unlock()
	done := make(chan error)
	go func() { done <- c.ClearOverride(context.Background()) }() // reads, finds nothing to clear
	<-slow.read                                                   // it has read the closed record

	permit, err := other.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	permit.Complete(breaker.Failure) // the other replica opens the circuit
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("after the refresh: %v, want open", s.State)
	}
	close(slow.released)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Errorf("the slow read's closed record replaced the open one: %+v", s)
	}
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("Acquire on a circuit the replica saw open: %v, want a rejection", err)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Generation <= seen[i-1].Generation {
			t.Errorf("observer saw generation %d after %d: %+v", seen[i].Generation, seen[i-1].Generation, seen)
		}
	}
}
