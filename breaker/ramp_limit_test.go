package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// While a ramp scales the adaptive limit by its share, a call that only the scaled
// limit turns away gets the ramp's refusal (ErrRamping, counted in RampRefused), not
// the limit's. A ramp that admits every call (RampFloor 1) leaves the limit's own
// refusals as they are.
func TestRampScaledLimitRefusesAsTheRamp(t *testing.T) {
	for _, floor := range []float64{0.5, 1} {
		h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute,
			RampFloor: floor, Limit: breaker.LimitPolicy{Max: 10}})
		h.recover(1)
		lim := h.b.Limiter()
		limitRefusals := 0
		for range 40 {
			refusedBefore, rampBefore := lim.Stats().Refused, h.b.Snapshot().RampRefused
			_, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 3})
			if err == nil || lim.Stats().Refused == refusedBefore {
				continue // admitted, or refused by the ramp's own share
			}
			limitRefusals++
			rampCounted := h.b.Snapshot().RampRefused == rampBefore+1
			switch {
			case floor < 1 && (!errors.Is(err, breaker.ErrRamping) || !rampCounted):
				t.Fatalf("floor %v: refused by the scaled limit with %v (RampRefused counted %v), want the ramp's refusal", floor, err, rampCounted)
			case floor == 1 && (!errors.Is(err, breaker.ErrSaturated) || errors.Is(err, breaker.ErrRamping) || rampCounted):
				t.Fatalf("floor 1: refused by the limit with %v (RampRefused counted %v), want the limit's refusal", err, rampCounted)
			}
		}
		if limitRefusals == 0 {
			t.Fatalf("floor %v: the limit refused nothing", floor)
		}
	}
}
