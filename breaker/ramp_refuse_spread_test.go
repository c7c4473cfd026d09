package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Refuse (a call turned away by the in-flight bound that rises with the ramp) spreads
// its refusals over the next eighth of the ramp like Admit's, so that the callers it
// turns away do not all come back at one time.
func TestRampRefuseSpreadsItsRefusals(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	r := backend.NewRamp("kafka:orders", p, t0, 0)
	since := 10 * time.Second
	seen := map[time.Time]bool{}
	for range 32 {
		e := r.Refuse(since)
		if off := e.NotBefore.Sub(t0); off <= since || off > since+16*time.Second {
			t.Fatalf("NotBefore %v after the close, want within (%v, %v]", off, since, since+16*time.Second)
		}
		seen[e.NotBefore] = true
	}
	if len(seen) < 8 {
		t.Fatalf("32 refusals came back at %d times, want them spread over at least 8 of the 16 slots", len(seen))
	}
}
