package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A bulk budget that grows at a window's close wakes the bulk callers waiting for
// headroom, also when no bulk call gave messages back (the window closed on an
// online completion while bulk work was still in flight).
func TestBulkBudgetGrowthAloneWakesBulkCallers(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.brkBulkWindow(breaker.Failure, 1, 1, 1)
	l.wantBulkLimit(25)
	bulk := l.take(13, breaker.Bulk) // more than half of the budget: used
	online := []breaker.LimitSlot{l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online)}
	wake := l.lim.BulkWake()
	l.clock.Advance(100 * time.Millisecond)
	for _, s := range online {
		l.lim.Release(s, breaker.Success, false)
	}
	l.wantBulkLimit(30) // 25 + sqrt(25)
	select {
	case <-wake:
	default:
		t.Fatal("a budget that grew woke no bulk caller")
	}
	l.lim.Release(bulk, breaker.Success, false)
}
