package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Without a ramp, bulk work beside other bulk work is admitted up to its whole
// budget, also above an online limit that a slow window contracted: the online limit
// does not cap the bulk budget (only a ramp's scaled limit does).
func TestBulkBudgetAboveAContractedLimitWithoutARamp(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 1, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(92) // a slow window, no bulk work: the limit contracts, the budget not
	l.wantBulkLimit(100)
	l.take(50, breaker.Bulk)
	l.take(50, breaker.Bulk) // 100 bulk messages beside bulk work: past the limit of 92
	if got := l.lim.Stats().BulkInFlight; got != 100 {
		t.Fatalf("%d bulk messages in flight, want the whole budget of 100", got)
	}
}
