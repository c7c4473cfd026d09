package breaker_test

import (
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
