package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Under Shadow, a call the adaptive limit would refuse is admitted as a bypass, and
// the bypass's outcome counts for nothing in a closed circuit: its Success neither
// resets the consecutive failures nor reports itself taken.
func TestShadowLimitBypassOutcomeCountsForNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Mode: breaker.Shadow,
		Limit: breaker.LimitPolicy{Max: 1, Min: 1}})
	h.call(breaker.Failure)
	held := h.acquire()
	bp := h.acquire()
	if !bp.Bypass() {
		t.Fatal("the call over the limit was not a bypass")
	}
	if bp.Complete(breaker.Success) {
		t.Error("the bypass's Success was taken by the closed circuit")
	}
	h.wantFailures(1)
	held.Complete(breaker.Failure)
	h.wantState(breaker.Open)
}
