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

// slowAnswer is a driver whose next write, once armed, is applied at once but
// answered only after then has run (time passing, other replicas writing).
type slowAnswer struct {
	*circuittest.MemoryDriver
	mu   sync.Mutex
	then func()
}

func (s *slowAnswer) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	err := s.MemoryDriver.Replace(ctx, id, expect, next)
	s.mu.Lock()
	then := s.then
	s.then = nil
	s.mu.Unlock()
	if err == nil && then != nil {
		then()
	}
	return err
}

// A snapshot's age counts from when the write was sent, not from when its answer came:
// a write answered 900 ms after it was applied leaves a snapshot 900 ms old, which
// a 1 s MaxStaleness must not trust for long, since the record may have moved on in
// the meantime (here another replica opened it).
func TestWrittenSnapshotAgesFromTheRequest(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	slow := &slowAnswer{MemoryDriver: store}
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 1, BreakDuration: time.Minute}
	newCircuit := func(d sharedstate.Driver) *sharedstate.Circuit {
		c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
			Driver: d, Clock: clock, MaxStaleness: time.Second, RetryDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, other := newCircuit(slow), newCircuit(store)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil { // creates the record
		t.Fatal(err)
	}
	slow.then = func() {
		clock.Advance(900 * time.Millisecond)
		if err := other.ForceOpen(ctx, clock.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
	}
	if err := c.ForceClose(ctx, clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		p.Complete(breaker.Success)
		t.Fatalf("Acquire on a snapshot written 900 ms ago, of a circuit opened since: %v; want a rejection after a refresh", err)
	}
}
