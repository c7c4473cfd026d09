package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window just past Tolerance moves the limit by a gradient close to 1 plus the
// square root of the limit, which can point above where it is: the limit still never
// rises past Max.
func TestLimitJustPastToleranceStaysWithinMax(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.wantLimit(100)
	l.clock.Advance(98 * time.Millisecond)
	l.brkRelease(4, 2200*time.Microsecond, breaker.Success, false) // 2.2ms: a ratio of about 2.08 to the moved baseline
	if s := l.lim.Stats(); s.Recent != 2200*time.Microsecond {
		t.Fatalf("the window did not close on its fourth completion: %+v", s)
	}
	l.wantLimit(100)
}
