package sharedstate_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A stored counter at the int64 maximum (a record written by hand, or by an attacker
// with write access to the store) must not make the engine write a record that its
// own check refuses: that record would admit nothing on any replica, and no override
// could repair it (issue 32). Counters stop at the maximum instead.
func TestCountersAtTheMaximumDoNotOverflow(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Second,
		SuccessesToClose: 2, HalfOpenMaxProbes: 2}
	fp, desc := sharedstate.Fingerprint(p)
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		rec     sharedstate.Record
		outcome breaker.Outcome
	}{
		{"failed probe", sharedstate.Record{State: breaker.Open, OpenUntil: 1, FailedProbes: math.MaxInt64}, breaker.Failure},
		{"probe success", sharedstate.Record{State: breaker.HalfOpen, Successes: math.MaxInt64}, breaker.Success},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := &circuittest.MemoryDriver{}
			r := tt.rec
			r.Version, r.Generation, r.Fingerprint, r.Policy = 7, 7, fp, desc
			if err := store.Replace(ctx, "kafka:orders", 0, r); err != nil {
				t.Fatal(err)
			}
			c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
				Driver: store, Clock: clock, RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			permit, err := c.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire (a probe): %v", err)
			}
			permit.Complete(tt.outcome)
			stored, err := store.Load(ctx, "kafka:orders")
			if err != nil {
				t.Fatal(err)
			}
			if err := stored.Check("kafka:orders"); err != nil {
				t.Fatalf("the engine wrote a record it refuses: %v (%+v)", err, stored)
			}
			if stored.Generation == 7 {
				t.Fatalf("the probe's outcome wrote no transition: %+v", stored)
			}
			clock.Advance(time.Hour)
			if permit, err := c.Acquire(ctx); errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("Acquire after the outcome: %v", err)
			} else if err == nil {
				permit.Complete(breaker.Neutral)
			}
		})
	}
}

// A version or generation that the next write would wrap to zero is refused when read,
// rather than advanced into a record that no replica accepts.
func TestVersionsNearTheMaximumAreRefusedOnRead(t *testing.T) {
	for _, r := range []sharedstate.Record{
		{Version: math.MaxUint64, Generation: 1},
		{Version: 1, Generation: math.MaxUint64},
	} {
		r.Fingerprint = "fp"
		if err := r.Check("kafka:orders"); !errors.Is(err, sharedstate.ErrCorrupt) {
			t.Errorf("Check of version %d, generation %d: %v; want ErrCorrupt", r.Version, r.Generation, err)
		}
	}
}
