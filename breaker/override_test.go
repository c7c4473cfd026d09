package breaker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Rule 10: ForceOpen rejects until its deadline, then the next call probes.
func TestForceOpenHoldsAndExpiresIntoProbe(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second})
	inFlight := h.acquire()
	h.b.ForceOpen(t0.Add(time.Minute))
	s := h.b.Snapshot()
	if s.State != breaker.Open || s.Override != breaker.ForcedOpen || !s.OverrideUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("snapshot %+v", s)
	}
	if oe := h.rejected(); !oe.NotBefore.Equal(t0.Add(time.Minute)) {
		t.Fatalf("NotBefore %v", oe.NotBefore)
	}
	if inFlight.Complete(breaker.Failure) {
		t.Fatal("an outcome counted under ForceOpen")
	}
	h.clock.Advance(time.Minute)
	if !h.acquire().Probe() {
		t.Fatal("the call after ForceOpen expired is not a probe")
	}
	want := []string{"closed>open:forced_open", "open>half-open:override_expired"}
	if got := h.reasons(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// Rule 10: ForceClose admits everything and ignores outcomes, then closes fresh.
func TestForceCloseHoldsAndExpiresClosedWithoutEvidence(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, MaxInFlight: 3})
	h.open(2)
	h.b.ForceClose(t0.Add(time.Minute))
	for range 10 {
		p := h.acquire()
		if p.Complete(breaker.Failure) {
			t.Fatal("an outcome counted under ForceClose")
		}
	}
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.Override != breaker.ForcedClosed {
		t.Fatalf("override %v", s.Override)
	}
	held := []breaker.Permit{h.acquire(), h.acquire(), h.acquire()}
	if _, err := h.b.Acquire(t.Context()); err != breaker.ErrSaturated {
		t.Fatalf("MaxInFlight under ForceClose: %v", err)
	}
	for _, p := range held {
		p.Complete(breaker.Neutral)
	}
	gen := h.b.Snapshot().Generation
	h.clock.Advance(time.Minute)
	h.call(breaker.Failure)
	s := h.b.Snapshot()
	if s.Override != breaker.NoOverride || s.Failures != 1 || s.Generation != gen+1 {
		t.Fatalf("after ForceClose expired: %+v (generation before %d)", s, gen)
	}
}

func TestClearOverride(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	h.b.ClearOverride() // nothing to clear
	if len(h.seen) != 0 {
		t.Fatal("ClearOverride without an override transitioned")
	}
	h.b.ForceOpen(t0.Add(time.Hour))
	h.b.ClearOverride()
	h.wantState(breaker.HalfOpen)
	h.call(breaker.Success)
	h.b.ForceClose(t0.Add(time.Hour))
	h.b.ClearOverride()
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	want := []string{"closed>open:forced_open", "open>half-open:override_cleared", "half-open>closed:probe_succeeded",
		"closed>closed:forced_closed", "closed>closed:override_cleared", "closed>open:failure_threshold"}
	if got := h.reasons(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// ClearOverride ends a ForceClose as a transition of its own: a new generation
// (the next number), reason ReasonOverrideCleared, delivered to the observers before
// ClearOverride returns.
func TestClearedForceCloseIsObservedAsTheNextGeneration(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	h.b.ForceClose(t0.Add(time.Hour))
	held := h.b.Snapshot().Generation
	h.b.ClearOverride()
	if len(h.seen) != 2 {
		t.Fatalf("transitions %+v, want the hold's and its end, delivered by ClearOverride", h.seen)
	}
	got := h.seen[1]
	if got.Reason != breaker.ReasonOverrideCleared || got.From != breaker.Closed || got.To != breaker.Closed || got.Generation != held+1 {
		t.Fatalf("transition %+v, want closed to closed, generation %d, %s", got, held+1, breaker.ReasonOverrideCleared)
	}
	if s := h.b.Snapshot(); s.Generation != held+1 || s.Override != breaker.NoOverride {
		t.Fatalf("snapshot %+v, want generation %d without an override", s, held+1)
	}
}

// A hold that ends by its deadline is a transition of its own, reason
// ReasonOverrideExpired, and the observers have it when the call that found the
// deadline passed returns, before any completion.
func TestExpiredHoldIsObservedByTheCallThatEndsIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hold     func(*breaker.Breaker, time.Time)
		from, to breaker.State
	}{
		{"ForceClose", (*breaker.Breaker).ForceClose, breaker.Closed, breaker.Closed},
		{"ForceOpen", (*breaker.Breaker).ForceOpen, breaker.Open, breaker.HalfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
			tc.hold(h.b, t0.Add(time.Minute))
			if len(h.seen) != 1 {
				t.Fatalf("transitions %+v, want the hold's", h.seen)
			}
			h.clock.Advance(time.Minute)
			h.acquire()
			if len(h.seen) != 2 {
				t.Fatalf("transitions %+v, want the hold's end delivered by Acquire", h.seen)
			}
			got := h.seen[1]
			if got.Reason != breaker.ReasonOverrideExpired || got.From != tc.from || got.To != tc.to || !got.At.Equal(t0.Add(time.Minute)) {
				t.Fatalf("transition %+v, want %v to %v for %s at the deadline", got, tc.from, tc.to, breaker.ReasonOverrideExpired)
			}
		})
	}
}

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

// ForceClose starts a generation of its own: its transition, the snapshot and the
// permits it admits carry the next generation, and their outcomes count for nothing.
func TestForceCloseIsTheNextGenerationAndIgnoresOutcomes(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	h.open(1) // generation 2
	h.b.ForceClose(t0.Add(time.Minute))
	if tr := h.seen[len(h.seen)-1]; tr.Generation != 3 || tr.To != breaker.Closed {
		t.Fatalf("ForceClose's transition %+v, want generation 3, closed", tr)
	}
	if g := h.b.Snapshot().Generation; g != 3 {
		t.Fatalf("generation %d after ForceClose, want 3", g)
	}
	p := h.acquire()
	if p.Generation() != 3 {
		t.Fatalf("permit of generation %d, want 3", p.Generation())
	}
	if p.Complete(breaker.Success) || h.acquire().Complete(breaker.Failure) {
		t.Fatal("an outcome under ForceClose was taken into account")
	}
	h.wantState(breaker.Closed)
}
