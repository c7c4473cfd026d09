package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A dependency that answers in no measurable time (a clock that did not move during
// the calls) has a baseline of 0 and healthy windows: the limit stays where it is, and
// its latency ratio is no division by zero.
func TestLimitZeroLatencyWindowsAreHealthy(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, 0)
	if s := l.lim.Stats(); !s.Ready || s.Baseline != 0 {
		t.Fatalf("after a warm-up of zero latency: ready %v baseline %v, want true 0", s.Ready, s.Baseline)
	}
	for range 5 {
		l.clock.Advance(100 * time.Millisecond)
		l.brkRelease(4, 0, breaker.Success, false)
		l.wantLimit(100)
	}
}
