package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// brkUnhealthySince fails unless the snapshot's UnhealthySince is want (zero: none).
func brkUnhealthySince(h *harness, want time.Time) {
	h.t.Helper()
	if got := h.b.Snapshot().UnhealthySince; !got.Equal(want) {
		h.t.Fatalf("UnhealthySince %v, want %v (state %v)", got, want, h.b.State())
	}
}

// An outage begins when a closed circuit first opens, by failures or by a hold:
// failed probes and holds within it do not move its start, closing ends it, and the
// snapshot keeps the count of failed probes.
func TestUnhealthySinceSpansOneOutage(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	brkUnhealthySince(h, time.Time{})
	h.clock.Advance(time.Second)
	opened := h.clock.Now()
	h.call(breaker.Failure)
	brkUnhealthySince(h, opened)
	h.clock.Advance(time.Second)
	h.call(breaker.Failure) // a failed probe
	brkUnhealthySince(h, opened)
	if got := h.b.Snapshot().FailedProbes; got != 1 {
		t.Fatalf("FailedProbes %d, want 1", got)
	}
	h.b.ForceOpen(h.clock.Now().Add(time.Minute))
	brkUnhealthySince(h, opened)
	h.b.ClearOverride()
	h.call(breaker.Success) // the probe closes it
	h.wantState(breaker.Closed)
	brkUnhealthySince(h, time.Time{})
	h.clock.Advance(time.Second)
	held := h.clock.Now()
	h.b.ForceOpen(held.Add(time.Minute))
	brkUnhealthySince(h, held)
	h.b.ForceClose(held.Add(time.Minute))
	brkUnhealthySince(h, time.Time{})
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

// A success gives its MaxInFlight slot back.
func TestSuccessGivesTheInFlightSlotBack(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 1})
	for range 3 {
		h.call(breaker.Success)
	}
	p := h.acquire()
	if _, err := h.b.Acquire(t.Context()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a second call beside one in flight: %v, want ErrSaturated", err)
	}
	p.Complete(breaker.Success)
	h.call(breaker.Success)
}

// In window mode successes are calls of the window: with them the window reaches
// MinimumCalls, and the failure ratio is taken over them.
func TestWindowSuccessesAreCalls(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Hour,
		MinimumCalls: 8, FailureRatio: 0.5})
	h.calls(breaker.Success, 4)
	h.calls(breaker.Failure, 3)
	h.wantState(breaker.Closed) // 7 calls
	h.call(breaker.Failure)     // 4 of 8
	h.wantState(breaker.Open)
	brkLastReason(h, breaker.ReasonFailureWindow)
}

// A circuit opened for rare traffic stays open for BreakDuration from the failure that
// opened it, then admits a probe.
func TestRareTrafficOpeningLastsOneBreak(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 20})
	h.call(breaker.Failure)
	h.clock.Advance(2 * time.Minute)
	opened := h.clock.Now()
	h.call(breaker.Failure)
	brkLastReason(h, breaker.ReasonRareTraffic)
	if oe := h.rejected(); !oe.NotBefore.Equal(opened.Add(10 * time.Second)) {
		t.Fatalf("NotBefore %v, want %v", oe.NotBefore, opened.Add(10*time.Second))
	}
	h.clock.Advance(10*time.Second - 1)
	h.rejected()
	h.clock.Advance(1)
	if !h.acquire().Probe() {
		t.Fatal("the call after the break is not a probe")
	}
}

// A policy without a ramp makes no Ramp.
func TestNoRampWithoutRampDuration(t *testing.T) {
	if r := backend.NewRamp("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, t0, 1); r != nil {
		t.Fatal("NewRamp of a policy without RampDuration is not nil")
	}
	if r := backend.NewRamp("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Second}, t0, 1); r == nil {
		t.Fatal("NewRamp of a policy with RampDuration is nil")
	}
}
