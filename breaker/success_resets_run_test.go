package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A Success resets the consecutive failures on every consecutive-mode circuit, not
// only on the plain one whose success takes the inline path: with MaxInFlight or slow
// calls on, failure, success, failure is still one failure.
func TestSuccessResetsTheRunOnEveryClosedCircuit(t *testing.T) {
	for name, p := range map[string]breaker.Policy{
		"MaxInFlight":      {MaxInFlight: 5},
		"SlowCallDuration": {SlowCallDuration: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			p.FailureThreshold, p.BreakDuration = 2, time.Minute
			h := newHarness(t, p)
			h.call(breaker.Failure)
			h.call(breaker.Success)
			h.wantFailures(0)
			h.call(breaker.Failure)
			h.wantState(breaker.Closed)
			h.wantFailures(1)
		})
	}
}
