package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// In window mode a Success ends the run of consecutive failures that the rare-traffic
// rule counts: a failure, a success, and a failure more than a window later is a run
// of one, which opens nothing.
func TestSuccessEndsTheRareTrafficRun(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute,
		FailureWindow: 10 * time.Second, MinimumCalls: 5})
	h.call(breaker.Failure)
	h.clock.Advance(time.Second)
	h.call(breaker.Success)
	h.clock.Advance(10 * time.Second)
	h.call(breaker.Failure)
	h.wantState(breaker.Closed)
	// The same calls without the success between them are a run of two, the first
	// more than a window ago: the rule opens the circuit.
	h.clock.Advance(11 * time.Second)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonRareTraffic {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonRareTraffic)
	}
}
