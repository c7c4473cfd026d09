package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// The baseline jumps halfway only toward a latency under half of it: a window at
// exactly half moves it by the usual twentieth.
func TestLimitBaselineAtExactlyHalfMovesByATwentieth(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	l.brkRelease(10, 4*time.Millisecond, breaker.Success, false)
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(1, 0, breaker.Failure, false) // closes the window: ten samples of 4ms
	if s := l.lim.Stats(); !s.Ready || s.Baseline != 4*time.Millisecond {
		t.Fatalf("%+v, want a 4ms baseline", s)
	}
	l.clock.Advance(98 * time.Millisecond)
	l.brkRelease(4, 2*time.Millisecond, breaker.Success, false) // exactly half
	if s := l.lim.Stats(); s.Recent != 2*time.Millisecond || s.Baseline != 4*time.Millisecond-2*time.Millisecond/20 {
		t.Fatalf("%+v, want recent 2ms and the baseline 4ms - 2ms/20", s)
	}
}
