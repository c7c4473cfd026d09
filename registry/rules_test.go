package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// A batch whose every message failed for the message's own reasons says nothing about
// the broker: Neutral, not the Success of a batch of which some went out.
func TestBatchOutcomeByItsMessages(t *testing.T) {
	refused := errors.New("message refused")
	neutral := func(error) breaker.Outcome { return breaker.Neutral }
	batch := func(failed ...int) error {
		be := &transport.BatchError{}
		for _, i := range failed {
			be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: refused})
		}
		return be
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"every message refused", batch(0, 1, 2), breaker.Neutral},
		{"some refused, the rest published", batch(0, 2), breaker.Success},
	} {
		if got := registry.Outcome(ctx, registry.Start{}, tc.err, 3, neutral); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Eviction drops only what is truly idle: not a circuit an operator holds closed,
// not one with a call in flight, and not one idle for less than the idle time.
func TestIdleEvictionSparesHeldBusyAndRecentCircuits(t *testing.T) {
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, MaxInFlight: 4}},
		registry.WithClock(clock), registry.WithIdleEviction(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	dest := func(name string) transport.Destination { return transport.Destination{Broker: "sqs", Name: name} }
	held, _ := r.Circuit(dest("held"))
	held.(*breaker.Breaker).ForceClose(t0.Add(time.Hour))
	busy, _ := r.Circuit(dest("busy"))
	permit, err := busy.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r.Circuit(dest("recent"))
	if n := r.EvictIdle(); n != 0 { // marks them idle from now
		t.Fatalf("evicted %d circuits that were just used", n)
	}
	clock.Advance(time.Second)
	if n := r.EvictIdle(); n != 0 {
		t.Fatalf("evicted %d circuits idle for a second of a minute", n)
	}
	clock.Advance(time.Minute)
	if n := r.EvictIdle(); n != 1 {
		t.Fatalf("evicted %d, want only the idle circuit with no hold and no call in flight", n)
	}
	snaps := r.Snapshots()
	for _, name := range []string{"held", "busy"} {
		if _, ok := snaps[dest(name)]; !ok {
			t.Errorf("%s was evicted", name)
		}
	}
	if _, ok := snaps[dest("recent")]; ok {
		t.Error("the idle circuit was kept")
	}
	permit.Complete(breaker.Success)
}
