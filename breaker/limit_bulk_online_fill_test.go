package breaker_test

import (
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
)

// Bulk work waits when online calls fill the limit, and only then: the bulk
// messages in flight count against the bulk budget, not as online calls filling the
// limit, so bulk calls beside each other take the whole budget even when it is the
// whole limit, and BulkHeadroom says so.
func TestBulkWaitsOnlyForOnlineCallsFillingTheLimit(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 1})
	l.wantBulkLimit(10)
	first := l.take(6, breaker.Bulk)
	if got := l.lim.BulkHeadroom(); got != 4 {
		t.Fatalf("BulkHeadroom beside 6 bulk messages %d, want 4", got)
	}
	l.take(4, breaker.Bulk) // 6 + 4 bulk of a budget and a limit of 10
	l.lim.Release(first, breaker.Success, false)

	var online []breaker.LimitSlot
	for range 10 {
		online = append(online, l.take(1, breaker.Online)) // online calls fill the limit
	}
	if _, err := l.lim.Acquire(breaker.Request{Weight: 1, Priority: breaker.Bulk}); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a bulk call beside online calls filling the limit: %v, want refused", err)
	}
	if got := l.lim.BulkHeadroom(); got != 0 {
		t.Fatalf("BulkHeadroom beside online calls filling the limit %d, want 0", got)
	}
	l.lim.Release(online[0], breaker.Success, false)
	l.take(1, breaker.Bulk) // 9 online calls of 10 leave bulk work its room
}
