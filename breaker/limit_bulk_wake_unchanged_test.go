package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window that leaves the bulk budget where it was wakes no bulk caller: BulkWake is
// closed when a bulk call gives messages back or the budget rises, so that callers
// waiting for headroom are not woken every window to find none.
func TestBulkBudgetUnchangedWakesNoBulkCaller(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.wantBulkLimit(50) // at its ceiling
	wake := l.lim.BulkWake()
	for range 3 {
		l.brkRelease(4, 100*time.Millisecond, breaker.Success, false) // a window closes
	}
	l.wantBulkLimit(50)
	select {
	case <-wake:
		t.Fatal("a window that left the bulk budget at 50 woke the bulk callers")
	default:
	}
}
