package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window in which no online call answered measures no online latency: bulk work
// that used its budget in it grows the budget by its square root, however slow the
// last measured window was for online calls.
func TestBulkBudgetGrowsInAWindowWithoutOnlineLatency(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.wantBulkLimit(50)
	// An online call dropped at its 10ms deadline: the pacer learns the deadline, and
	// the window's drop halves the budget.
	l.clock.Advance(90 * time.Millisecond)
	missed := l.take(1, breaker.Online)
	l.brkRelease(3, time.Millisecond, breaker.Success, false)
	l.clock.Advance(9 * time.Millisecond)
	l.lim.Release(missed, breaker.Neutral, true) // the window closes with it
	l.wantBulkLimit(25)
	// Online calls at 8ms, past 40% of the deadline: the budget shrinks.
	l.clock.Advance(92 * time.Millisecond)
	l.brkRelease(4, 8*time.Millisecond, breaker.Success, false)
	l.wantBulkLimit(12)
	// Bulk work alone, using the whole budget: it grows.
	var bulk []breaker.LimitSlot
	for range 4 {
		bulk = append(bulk, l.take(3, breaker.Bulk))
	}
	l.clock.Advance(100 * time.Millisecond)
	for _, s := range bulk { // the window closes with the fourth
		l.lim.Release(s, breaker.Success, false)
	}
	l.wantBulkLimit(16) // 12.5 + sqrt(12.5)
}
