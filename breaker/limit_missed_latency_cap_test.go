package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// An online call dropped at its deadline teaches the bulk pacer the online deadline
// from its latency, kept in milliseconds beside a count of such calls; a latency too
// long for its field (2^40 ms, about 35 years, on a fake clock) is capped, not
// carried into the count: the pacer learns a very long deadline, not one of a
// millisecond, and bulk work used beside 1ms online calls grows instead of being cut.
func TestLimitMissedLatencyIsCappedNotCarried(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond)
	l.wantBulkLimit(50)
	s := l.take(1, breaker.Online)
	l.clock.Advance((1<<40 + 1) * time.Millisecond)
	l.lim.Release(s, breaker.Neutral, true) // dropped: the window closes on it (ten Windows passed)
	l.wantBulkLimit(25)

	bulk := l.take(13, breaker.Bulk) // more than half of the budget: used
	l.brkRelease(4, time.Millisecond, breaker.Success, false)
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(1, time.Millisecond, breaker.Success, false)
	l.lim.Release(bulk, breaker.Success, false)
	if got := l.lim.Stats().BulkLimit; got <= 25 {
		t.Fatalf("bulk budget %d after a used window of 1ms online calls, want it grown from 25", got)
	}
}
