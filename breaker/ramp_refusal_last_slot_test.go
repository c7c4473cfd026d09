package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// A Ramp's refusal comes back within the next eighth of the ramp even for the call
// whose point of the sequence is the very last one (2^64-1): it takes the last of the
// 16 slots, not one past them.
func TestRampRefusalOfTheLastPointStaysInTheEighth(t *testing.T) {
	const golden = 0x9E3779B97F4A7C15 // the Ramp's step, as documented on its seq
	inv := uint64(golden)             // golden's inverse modulo 2^64, by Newton's iteration
	for range 6 {
		inv *= 2 - golden*inv
	}
	if inv*golden != 1 {
		t.Fatalf("inverse %#x of golden is wrong", inv)
	}
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	// The first call is number seed+1 = -inv, whose point is -inv*golden = 2^64-1.
	r := backend.NewRamp("kafka:orders", p, t0, ^inv)
	since := 10 * time.Second
	share, refusal := r.Admit(since)
	if share >= 1 || refusal == nil {
		t.Fatalf("Admit of the last point: share %v refusal %v, want refused", share, refusal)
	}
	if off := refusal.NotBefore.Sub(t0); off <= since || off > since+16*time.Second {
		t.Fatalf("NotBefore %v after the close, want within (%v, %v]", off, since, since+16*time.Second)
	}
}
