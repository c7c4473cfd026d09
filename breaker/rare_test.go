package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// TestRareTrafficToADeadBrokerOpens: one call per 10 s to a dead broker, for 20
// simulated minutes. Every policy the docs show (README examples, docs/slowness.md,
// the window policies that never opened) opens within 10 calls or is refused
// by Validate; window policies whose MinimumCalls the traffic cannot reach fall back
// to consecutive counting.
func TestRareTrafficToADeadBrokerOpens(t *testing.T) {
	policies := map[string]breaker.Policy{
		"README consecutive 5":          {FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2},
		"README override 2":             {FailureThreshold: 2, BreakDuration: time.Minute},
		"README 10s break":              {FailureThreshold: 5, BreakDuration: 10 * time.Second},
		"DefaultPolicy":                 breaker.DefaultPolicy(),
		"window 10s, min 20, ratio 0.5": {FailureThreshold: 5, BreakDuration: 10 * time.Second, FailureWindow: 10 * time.Second, MinimumCalls: 20, FailureRatio: 0.5, SlowCallDuration: 250 * time.Millisecond, RampDuration: 5 * time.Second},
		"window 60s, min 10":            {FailureThreshold: 5, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 10},
		"window 60s, min 10, ratio 0.5": {FailureThreshold: 3, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 10, FailureRatio: 0.5},
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			if err := p.Validate(); err != nil {
				return // refused: the other way to pass
			}
			h := newHarness(t, p)
			calls := 0
			for range 120 { // 20 minutes
				if pm, err := h.b.Acquire(t.Context()); err == nil {
					calls++
					pm.Complete(breaker.Failure)
				}
				if h.b.State() != breaker.Closed {
					break
				}
				h.clock.Advance(10 * time.Second)
			}
			if h.b.State() != breaker.Open || calls > 10 {
				t.Fatalf("after %d calls the circuit is %v; want open within 10", calls, h.b.State())
			}
		})
	}
}

// Busy traffic is still judged by the window: failures quicker than the window below
// MinimumCalls do not open it.
func TestRareTrafficFallbackLeavesBusyWindowsAlone(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 20})
	for range 19 {
		h.call(breaker.Failure)
		h.clock.Advance(time.Second)
	}
	h.wantState(breaker.Closed)
	h.clock.Advance(time.Minute)
	h.call(breaker.Failure) // the run began more than a window ago, and the window holds few calls
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonRareTraffic {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonRareTraffic)
	}
}
