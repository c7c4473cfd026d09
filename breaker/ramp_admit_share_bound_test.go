package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// A ramp admits a call when its point of the sequence lies below share*2^64, so that
// exactly the share of the 2^64 points is admitted: the point at the bound itself is
// refused. With a share of 0.5 the bound is 2^63, the point of call number 2^63.
func TestRampRefusesThePointAtItsBound(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute, RampFloor: 0.5}
	// The first call is number seed+1 = 2^63; its point is 2^63*golden = 2^63 (golden is odd).
	r := backend.NewRamp("kafka:orders", p, t0, 1<<63-1)
	if share, refusal := r.Admit(0); share != 0.5 || refusal == nil {
		t.Fatalf("Admit of the point 2^63 at a share of 0.5: share %v refusal %v, want refused", share, refusal)
	}
	// The next call's point, (2^63+1)*golden = golden - 2^63 mod 2^64, lies below the
	// bound: admitted.
	if share, refusal := r.Admit(0); share != 0.5 || refusal != nil {
		t.Fatalf("Admit of the point 2^63+golden: share %v refusal %v, want admitted", share, refusal)
	}
}
