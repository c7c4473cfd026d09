package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Latency alone contracts the limit no lower than the demand of the last healthy
// windows: after a healthy window with 95 calls in flight, a slow window takes the
// limit to 95, not to the smooth step's 92.
func TestLimitSlowWindowStopsAtTheHealthyDemand(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond) // demand 10
	l.clock.Advance(98 * time.Millisecond)
	var slots []breaker.LimitSlot
	for range 95 {
		slots = append(slots, l.take(1, breaker.Online))
	}
	l.clock.Advance(time.Millisecond)
	for _, s := range slots[:94] {
		l.lim.Release(s, breaker.Success, false)
	}
	l.clock.Advance(time.Millisecond)
	l.lim.Release(slots[94], breaker.Success, false) // closes a healthy window: demand 95
	l.wantLimit(100)
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(95) // 100*0.8 + (100*0.5 + sqrt(100))*0.2 = 92, held at 95
}
