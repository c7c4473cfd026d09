package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// mb2Contracted returns a limiter with a bulk budget of 100 whose online limit a slow
// window (no bulk work in it) contracted to 92: the budget stays whole.
func mb2Contracted(t *testing.T) *brkLimiter {
	t.Helper()
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 1, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(92)
	l.wantBulkLimit(100)
	return l
}

// Without a ramp, bulk work beside other bulk work is admitted up to its whole
// budget, also above an online limit that a slow window contracted: the online limit
// does not cap the bulk budget (only a ramp's scaled limit does).
func TestBulkBudgetAboveAContractedLimitWithoutARamp(t *testing.T) {
	l := mb2Contracted(t)
	l.take(50, breaker.Bulk)
	l.take(50, breaker.Bulk) // 100 bulk messages beside bulk work: past the limit of 92
	if got := l.lim.Stats().BulkInFlight; got != 100 {
		t.Fatalf("%d bulk messages in flight, want the whole budget of 100", got)
	}
}

// Without a ramp, the headroom of a bulk caller with no bulk work in flight is the
// whole bulk budget, also above a limit that slow windows contracted (a lone bulk call
// is admitted whatever its size); only a ramp's share caps it by the limit.
func TestBulkHeadroomWithoutARampIsTheWholeBudget(t *testing.T) {
	l := mb2Contracted(t)
	if got := l.lim.BulkHeadroom(); got != 100 {
		t.Fatalf("BulkHeadroom %d, want the whole budget of 100", got)
	}
	l.take(100, breaker.Bulk)
}
