package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Without a ramp RampShare is 1 for any time since the close, also a time before it
// (a backend whose clock is behind the one that closed the circuit), as it is from a
// ramp's end on, however long after it.
func TestRampShareWithoutARampIsOne(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}
	for _, since := range []time.Duration{-time.Second, 0, time.Hour} {
		if got := backend.RampShare(p, since); got != 1 {
			t.Fatalf("RampShare(%v) without a ramp = %v, want 1", since, got)
		}
	}
	p.RampDuration = time.Minute
	for _, since := range []time.Duration{time.Minute, 2 * time.Minute, time.Hour} {
		if got := backend.RampShare(p, since); got != 1 {
			t.Fatalf("RampShare(%v) of a one-minute ramp = %v, want 1", since, got)
		}
	}
}
