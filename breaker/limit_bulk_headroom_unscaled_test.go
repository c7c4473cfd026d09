package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Without a ramp, the headroom of a bulk caller with no bulk work in flight is the
// whole bulk budget, also above a limit that slow windows contracted (a lone bulk call
// is admitted whatever its size); only a ramp's share caps it by the limit.
func TestBulkHeadroomWithoutARampIsTheWholeBudget(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 1, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(92) // a slow window, no bulk work: the limit contracts, the budget not
	l.wantBulkLimit(100)
	if got := l.lim.BulkHeadroom(); got != 100 {
		t.Fatalf("BulkHeadroom %d, want the whole budget of 100", got)
	}
	l.take(100, breaker.Bulk)
}
