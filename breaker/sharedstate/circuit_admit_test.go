package sharedstate_test

// What a closed circuit's permit carries (circuit.go: admit, Snapshot): its start
// time when calls are timed, and this process's adaptive limit in Snapshot.

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// With SlowCallDuration, a success is timed from its Acquire: a quick one resets the
// failure count, one slower than SlowCallDuration counts as a failure.
func TestSuccessIsTimedFromItsAcquire(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCSHooked()
	c := csAged(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.SlowCallDuration = time.Second })
	clock.Advance(time.Hour) // permits are timed on the circuit's own clock, from its creation
	outcome(t, c, breaker.Failure)
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	p.Complete(breaker.Success)
	if r := csStored(t, d); r.Failures != 0 {
		t.Fatalf("failures after a success that took SlowCallDuration: %d; want 0", r.Failures)
	}
	outcome(t, c, breaker.Failure)
	if p, err = c.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second + 1)
	p.Complete(breaker.Success)
	if r := csStored(t, d); r.Failures != 2 {
		t.Fatalf("failures after a failure and a success slower than SlowCallDuration: %d; want 2", r.Failures)
	}
}

// Snapshot reports this process's adaptive limit when the policy sets one.
func TestSnapshotReportsTheAdaptiveLimit(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := csFresh(t, newCounting(), clock, func(cfg *sharedstate.Config) { cfg.Policy.Limit = breaker.LimitPolicy{Max: 40} })
	if s := c.Snapshot(); s.Limit.Limit == 0 || s.Limit.Limit > 40 {
		t.Fatalf("Snapshot's limit %+v; want the adaptive limit, at most 40", s.Limit)
	}
}

// Without MaxInFlight nothing is counted in flight: a completed permit leaves 0.
func TestNoInFlightCountWithoutMaxInFlight(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := csFresh(t, newCounting(), clock, nil)
	for range 3 {
		if ok, err := csAdmitted(c); !ok {
			t.Fatal(err)
		}
	}
	if s := c.Snapshot(); s.InFlight != 0 {
		t.Fatalf("in flight after three completed calls, no MaxInFlight: %d; want 0", s.InFlight)
	}
}
