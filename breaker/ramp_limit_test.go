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

// While a ramp also scales MaxInFlight, a call the limit admits but the ramp's
// in-flight bound turns away gives its slot back and gets the ramp's refusal,
// counted; bulk work's budget is scaled by the ramp's share like the limit.
func TestRampBoundsInFlightAndBulkBudgetBesideTheLimit(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 4, RampDuration: time.Minute,
		RampFloor: 0.5, Limit: breaker.LimitPolicy{Max: 20, BulkShare: 1}})
	h.recover(1)
	lim := h.b.Limiter()
	refusals := 0
	for range 60 {
		rampBefore := h.b.Snapshot().RampRefused
		_, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 1})
		if err == nil {
			continue
		}
		refusals++
		if !errors.Is(err, breaker.ErrRamping) || h.b.Snapshot().RampRefused != rampBefore+1 {
			t.Fatalf("refusal %v (RampRefused %d -> %d), want the ramp's, counted once", err, rampBefore, h.b.Snapshot().RampRefused)
		}
	}
	if s := h.b.Snapshot(); s.InFlight != 2 || lim.Stats().InFlight != 2 || refusals < 40 {
		t.Fatalf("in flight %d (limit's %d) after %d refusals; want the ramp's bound of 2 and most calls refused", s.InFlight, lim.Stats().InFlight, refusals)
	}

	b := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute,
		RampFloor: 0.5, Limit: breaker.LimitPolicy{Max: 20, BulkShare: 1}})
	b.recover(1)
	for range 60 {
		_, _ = b.b.AcquireRequest(t.Context(), breaker.Request{Weight: 4, Priority: breaker.Bulk}) // held, or refused
		if got := b.b.Limiter().Stats().BulkInFlight; got > 8 {
			t.Fatalf("%d bulk messages in flight, want at most the 10 of a budget of 20 scaled by 0.5", got)
		}
	}
	if got := b.b.Limiter().Stats().BulkInFlight; got != 8 {
		t.Fatalf("%d bulk messages in flight, want 8", got)
	}
}
