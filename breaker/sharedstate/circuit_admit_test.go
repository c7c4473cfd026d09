package sharedstate_test

// What a closed circuit's permit carries (circuit.go: admit): its start time when
// calls are timed.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// With SlowCallDuration, a success is timed from its Acquire: a quick one resets the
// failure count, one slower than SlowCallDuration counts as a failure.
func TestSuccessIsTimedFromItsAcquire(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.SlowCallDuration = time.Second })
	clock.Advance(time.Hour) // permits are timed on the circuit's own clock, from its creation
	outcome(t, c, breaker.Failure)
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	p.Complete(breaker.Success)
	if r := storedRecord(t, d.MemoryDriver); r.Failures != 0 {
		t.Fatalf("failures after a success that took SlowCallDuration: %d; want 0", r.Failures)
	}
	outcome(t, c, breaker.Failure)
	if p, err = c.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second + 1)
	p.Complete(breaker.Success)
	if r := storedRecord(t, d.MemoryDriver); r.Failures != 2 {
		t.Fatalf("failures after a failure and a success slower than SlowCallDuration: %d; want 2", r.Failures)
	}
}

// Without MaxInFlight nothing is counted in flight: a completed permit leaves 0.
func TestNoInFlightCountWithoutMaxInFlight(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := freshCircuit(t, newCounting(), clock, nil)
	for range 3 {
		if ok, err := acquireNeutral(c); !ok {
			t.Fatal(err)
		}
	}
	if s := c.Snapshot(); s.InFlight != 0 {
		t.Fatalf("in flight after three completed calls, no MaxInFlight: %d; want 0", s.InFlight)
	}
}

// With MaxInFlight calls in flight during the ramp, a call the ramp admits is
// ErrSaturated (the ramp refuses the others). The ramp admits its share of calls by
// a Weyl sequence: at a share of one half, any three calls in a row hold one it
// admits, whatever the sequence's seed.
func TestRampAtMaxInFlightIsSaturated(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.MaxInFlight = 4
		cfg.Policy.RampDuration = 10 * time.Second
	})
	var held []breaker.Permit
	for range 4 {
		held = append(held, mustAcquire(t, c))
	}
	defer func() {
		for _, p := range held {
			p.Complete(breaker.Neutral)
		}
	}()
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // closed 5 s ago by a probe: share 0.5
		r.Generation++
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, clock.Now().Add(-5*time.Second).UnixNano()
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	saturated := 0
	for i := range 3 {
		p, err := c.Acquire(context.Background())
		switch {
		case errors.Is(err, breaker.ErrSaturated):
			saturated++
		case rampRefusal(err):
		default:
			if err == nil {
				p.Complete(breaker.Neutral)
			}
			t.Fatalf("call %d at MaxInFlight during the ramp: %v; want ErrSaturated or a ramp refusal", i, err)
		}
	}
	if saturated == 0 {
		t.Fatal("at MaxInFlight the ramp refused all three calls; want the ones it admits ErrSaturated")
	}
}

// Each close ramps from its own close time: after a later close (a new generation),
// the calls the ramp turns away are told to come back after now, not at slots of the
// earlier ramp.
func TestEachCloseRampsFromItsOwnCloseTime(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.RampDuration = 10 * time.Second
		cfg.MaxStaleness = time.Minute // the calls decide on the snapshot each Refresh installs
	})
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // two closes by a probe, an hour apart
		editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
			r.Generation += 3 // opened, half-open, closed again
			r.Reason, r.Since = breaker.ReasonProbeSucceeded, clock.Now().UnixNano()
		})
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second) // the ramp admits a tenth
		refused := 0
		for range 10 {
			p, err := c.Acquire(ctx)
			var oe *breaker.OpenError
			switch {
			case err == nil:
				p.Complete(breaker.Neutral)
			case errors.As(err, &oe) && rampRefusal(err):
				refused++
				if !oe.NotBefore.After(clock.Now()) {
					t.Fatalf("the ramp of the close at %v refused a call until %v, not after now (%v)", clock.Now().Add(-time.Second), oe.NotBefore, clock.Now())
				}
			default:
				t.Fatalf("Acquire during the ramp: %v", err)
			}
		}
		if refused == 0 {
			t.Fatal("the ramp admitting a tenth refused none of 10 calls")
		}
		clock.Advance(time.Hour)
	}
}

// A snapshot read at the very end of a ramp carries no ramp: a clock that then steps
// back (here to a second after the close) admits every call.
func TestSnapshotReadAtTheRampsEndHasNoRamp(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.RampDuration = 10 * time.Second
		cfg.MaxStaleness = time.Minute
	})
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	closed := clock.Now()
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.Generation += 3
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, closed.UnixNano()
	})
	clock.Advance(10 * time.Second) // the ramp ends as the record is read
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Set(closed.Add(time.Second)) // where the ramp would admit a tenth
	for i := range 3 {
		if ok, err := acquireNeutral(c); !ok {
			t.Fatalf("call %d on a snapshot read at the ramp's end: %v; want admitted", i, err)
		}
	}
}

// MaxInFlight under contention: callers turned away never show in the count, so a
// Snapshot taken at any moment reports at most MaxInFlight in flight.
func TestInFlightNeverOverMaxInFlight(t *testing.T) {
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
		Policy: breaker.Policy{Scope: breaker.SharedDependency, MaxInFlight: 1}, Driver: &circuittest.MemoryDriver{}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Complete(breaker.Success)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if p, err := c.Acquire(context.Background()); err == nil {
					p.Complete(breaker.Success)
					t.Error("admitted over MaxInFlight")
				}
			}
		})
	}
	for range 20000 {
		if n := c.Snapshot().InFlight; n != 1 {
			t.Errorf("InFlight %d while one permit is held at MaxInFlight 1", n)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}
