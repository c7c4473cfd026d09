package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// A Ramp's refusals come back on slot boundaries (RampDuration/128 apart) within the
// next eighth of the ramp, one shared error per slot; a call past the ramp is
// admitted with share 1; Until is the close plus RampDuration.
func TestRampRefusalsShareOneErrorPerSlot(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	r := backend.NewRamp("kafka:orders", p, t0, 7)
	if !r.Until().Equal(t0.Add(128 * time.Second)) {
		t.Fatalf("Until %v", r.Until())
	}
	if share, refusal := r.Admit(128 * time.Second); share != 1 || refusal != nil {
		t.Fatalf("Admit at the end of the ramp: %v %v, want 1 and admitted", share, refusal)
	}
	since := 10*time.Second + 500*time.Millisecond
	bySlot := map[time.Time]*breaker.OpenError{}
	check := func(oe *breaker.OpenError) {
		t.Helper()
		off := oe.NotBefore.Sub(t0)
		if off%time.Second != 0 || off <= since || off > since+16*time.Second || !isRampRefusal(oe) || oe.Identity != "kafka:orders" {
			t.Fatalf("refusal %+v: want a ramp refusal on a 1s boundary within (%v, %v]", oe, since, since+16*time.Second)
		}
		if prev, ok := bySlot[oe.NotBefore]; ok && prev != oe {
			t.Fatalf("two errors for the slot at %v", off)
		}
		bySlot[oe.NotBefore] = oe
	}
	refused := 0
	for range 400 {
		share, refusal := r.Admit(since)
		if share != backend.RampShare(p, since) {
			t.Fatalf("share %v, want %v", share, backend.RampShare(p, since))
		}
		if refusal != nil {
			refused++
			check(refusal)
		}
	}
	if want := 400 * (1 - backend.RampShare(p, since)); float64(refused) < want-8 || float64(refused) > want+8 {
		t.Fatalf("%d of 400 refused, want about %.0f", refused, want)
	}
	for range 200 {
		check(r.Refuse(since))
	}
	if len(bySlot) != 16 {
		t.Fatalf("refusals over %d slots, want 16", len(bySlot))
	}
}
