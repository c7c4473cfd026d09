package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A healthy window explores only while the limit is used at least half: a limit
// under its ceiling (twice the demand) stays where it is when few calls use it.
func TestLimitUnderItsCeilingExploresOnlyWhenUsed(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 60, time.Millisecond) // ready: baseline 1ms, demand 60
	l.brkRelease(4, 100*time.Millisecond, breaker.Failure, false)
	l.wantLimit(50) // every completion a drop: halved, well under twice the demand
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(4, time.Millisecond, breaker.Success, false)
	l.wantLimit(50) // healthy, but 4 in flight is not half of 50
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(25, time.Millisecond, breaker.Success, false)
	l.wantLimit(57) // 25 is half: 50 + sqrt(50)
}
