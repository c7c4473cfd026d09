package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// mb2Ready returns a limiter of policy p made ready in its first window: n online
// successes of the given latency, then one more at the end of the Window.
func mb2Ready(t *testing.T, p breaker.LimitPolicy, n int, latency time.Duration) *brkLimiter {
	t.Helper()
	l := newBrkLimiter(t, p)
	l.brkRelease(n, latency, breaker.Success, false)
	l.clock.Advance(p.Window - latency)
	l.brkRelease(1, latency, breaker.Success, false)
	return l
}

// While bulk work gives way in a slow window, online calls keep their limit and
// explore up by its square root when the window used half of the limit — exactly
// half counts — and not when it used less, though the limit is under its ceiling.
func TestLimitExploresBesideGivingWayBulkAtExactlyHalfUsed(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 60, time.Millisecond) // ready: baseline 1ms, demand 60
	l.wantLimit(100)
	// One drop of five: the limit contracts to 100 * (1 - 0.5/5).
	var slots []breaker.LimitSlot
	for range 5 {
		slots = append(slots, l.take(1, breaker.Online))
	}
	l.clock.Advance(99 * time.Millisecond)
	l.lim.Release(slots[0], breaker.Neutral, true)
	l.lim.Release(slots[1], breaker.Success, false)
	l.lim.Release(slots[2], breaker.Success, false)
	l.lim.Release(slots[3], breaker.Success, false)
	l.clock.Advance(time.Millisecond) // the window closes with its fifth completion
	l.lim.Release(slots[4], breaker.Success, false)
	l.wantLimit(90)
	// Slow windows with bulk work and 5 online calls in flight (online latency 100ms).
	slowWindow := func(bulkWeight int) {
		t.Helper()
		bulk := l.take(bulkWeight, breaker.Bulk)
		slots = slots[:0]
		for range 5 {
			slots = append(slots, l.take(1, breaker.Online))
		}
		l.clock.Advance(100 * time.Millisecond)
		l.lim.Release(bulk, breaker.Success, false)
		for _, s := range slots {
			l.lim.Release(s, breaker.Success, false)
		}
	}
	slowWindow(30)
	l.wantLimit(90) // 35 in flight, under half of 90 (and 90 under the ceiling of 100)
	slowWindow(40)
	l.wantLimit(99) // 45 in flight, half of 90: 90 + sqrt(90)
}
