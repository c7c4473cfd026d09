package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window whose latency is exactly Tolerance times the baseline is healthy, also with
// bulk work in flight (bulk work gives way only past it): it becomes the limit that
// Recovered returns to.
func TestLimitWindowAtToleranceWithBulkWorkIsHealthy(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 60, 9*time.Millisecond) // ready: baseline 9ms, limit 100
	l.brkRelease(4, 100*time.Millisecond, breaker.Failure, false)
	l.wantLimit(50)
	// Bulk work in flight and four online calls of 19ms: the baseline moves to
	// 9ms + (19ms-9ms)/20 = 9.5ms, and 19ms is exactly Tolerance (2) times it.
	bulk := l.take(10, breaker.Bulk)
	l.brkRelease(4, 19*time.Millisecond, breaker.Success, false)
	l.clock.Advance(81 * time.Millisecond)
	l.lim.Release(bulk, breaker.Success, false) // closes the window
	if s := l.lim.Stats(); s.Baseline != 9500*time.Microsecond || s.Recent != 19*time.Millisecond {
		t.Fatalf("%+v, want baseline 9.5ms and recent 19ms", s)
	}
	l.wantLimit(50)
	l.brkRelease(4, 100*time.Millisecond, breaker.Failure, false)
	l.wantLimit(25)
	l.lim.Recovered()
	l.wantLimit(50) // the healthy window's limit, not the 100 of the warm-up
}
