package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// mb4RampCallAt returns the seed whose first call lands on point x of the Ramp's
// sequence (call n's point is n times the documented step, modulo 2^64).
func mb4RampCallAt(t *testing.T, x uint64) uint64 {
	t.Helper()
	const golden = 0x9E3779B97F4A7C15
	inv := uint64(golden) // golden's inverse modulo 2^64, by Newton's iteration
	for range 6 {
		inv *= 2 - golden*inv
	}
	if inv*golden != 1 {
		t.Fatalf("inverse %#x of golden is wrong", inv)
	}
	return x*inv - 1 // the first call is number seed+1
}

// A Ramp admits the calls whose points fall below share*2^64, and no other: at a
// share of exactly one half the point just under 2^63 is admitted and the point 2^63
// itself, the first of the refused half, is turned away (otherwise the ramp would
// admit one point more than its share).
func TestRampRefusesThePointAtTheShareBoundary(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second}
	since := 64 * time.Second // a linear ramp's share is exactly 1/2 here
	for _, c := range []struct {
		point  uint64
		admits bool
	}{
		{1<<63 - 1, true},
		{1 << 63, false},
	} {
		r := breaker.NewRamp("kafka:orders", p, t0, mb4RampCallAt(t, c.point))
		share, refusal := r.Admit(since)
		if share != 0.5 {
			t.Fatalf("share %v at half the ramp, want 0.5", share)
		}
		if admitted := refusal == nil; admitted != c.admits {
			t.Errorf("the call at point %#x: admitted %v, want %v", c.point, admitted, c.admits)
		}
	}
}
