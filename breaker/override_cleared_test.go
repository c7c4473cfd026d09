package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
