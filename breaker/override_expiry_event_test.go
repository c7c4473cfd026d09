package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
