package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window in which only bulk work answered measures no online latency, and counts
// as healthy whatever the last measured window said: its limit is the one Recovered
// returns to, not the older one before a slow window contracted it.
func TestLimitBulkOnlyWindowIsHealthy(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(92) // a slow window, no bulk work: the limit contracts
	var bulk []breaker.LimitSlot
	for range 4 {
		bulk = append(bulk, l.take(5, breaker.Bulk))
	}
	l.clock.Advance(100 * time.Millisecond)
	for _, s := range bulk { // the window closes with the fourth: no online call in it
		l.lim.Release(s, breaker.Success, false)
	}
	l.wantLimit(92)
	l.lim.Recovered()
	l.wantLimit(92)
}
