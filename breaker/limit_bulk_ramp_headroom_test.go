package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// During a ramp after recovery the bulk headroom is the bulk budget within the limit
// scaled by the ramp's share as the last admission saw it, so that the outbox sizes
// its batches to what the ramp admits: at a share of 0.5 half of the limit, at 0.75
// three quarters of it.
func TestBulkHeadroomFollowsTheRampsShare(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute,
		RampFloor: 0.5, Limit: breaker.LimitPolicy{Max: 20, BulkShare: 1}})
	closed := h.recover(1)
	lim := h.b.Limiter()
	for _, since := range []time.Duration{0, 45 * time.Second} {
		h.clock.Set(closed.Add(since))
		admitted := false
		for range 100 { // the ramp turns some calls away before the limit sees them
			if p, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 1}); err == nil {
				admitted = true
				p.Complete(breaker.Success)
				break
			}
		}
		if !admitted {
			t.Fatalf("%v into the ramp: no call admitted", since)
		}
		share, st := h.b.Policy().RampShare(since), lim.Stats()
		want := min(st.BulkLimit, int(share*float64(st.Limit)))
		if since == 0 && want >= st.BulkLimit {
			t.Fatalf("the scaled limit (%d) does not bind below the bulk budget (%d)", want, st.BulkLimit)
		}
		if got := lim.BulkHeadroom(); got != want || want < 2 {
			t.Fatalf("%v into the ramp (share %v): BulkHeadroom %d, want %d (limit %d, bulk budget %d)", since, share, got, want, st.Limit, st.BulkLimit)
		}
	}
}
