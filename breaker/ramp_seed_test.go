package breaker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Each recovery seeds its ramp from the breaker's random source, so that replicas
// seeing the same calls do not admit and refuse the same ones: two breakers whose
// random draws differ ramp the same calls differently.
func TestRampDecisionsFollowTheRandomDraw(t *testing.T) {
	decisions := func(r float64) (got []bool) {
		h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute, RampFloor: 0.5},
			breaker.WithRandom(func() float64 { return r }))
		h.recover(1)
		for range 16 {
			p, err := h.b.Acquire(t.Context())
			if err == nil {
				p.Complete(breaker.Success)
			}
			got = append(got, err == nil)
		}
		return got
	}
	a, b := decisions(0.25), decisions(0.75)
	if slices.Equal(a, b) {
		t.Fatalf("draws 0.25 and 0.75 admitted the same calls %v: the ramp ignores its seed", a)
	}
}
