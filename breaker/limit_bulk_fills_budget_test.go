package breaker_test

import (
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
)

// A bulk call beside other bulk work is admitted when it fills the bulk budget
// exactly, and the next message past it is refused.
func TestLimiterAdmitsABulkCallThatFillsTheBudgetExactly(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	l.wantBulkLimit(5)
	l.take(2, breaker.Bulk)
	l.take(3, breaker.Bulk) // 2 + 3 = the budget of 5
	if _, err := l.lim.Acquire(breaker.Request{Weight: 1, Priority: breaker.Bulk}); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a bulk message past a full budget: %v, want refused", err)
	}
	if got := l.lim.Stats().BulkInFlight; got != 5 {
		t.Fatalf("%d bulk messages in flight, want 5", got)
	}
}
