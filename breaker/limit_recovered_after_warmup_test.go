package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// The window that ends the warm-up is the first healthy one: when drops contract the
// limit right after it, Recovered returns to the limit the warm-up ended with.
func TestLimitRecoveredReturnsToTheWarmUpsLimit(t *testing.T) {
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond)
	if !l.lim.Stats().Ready {
		t.Fatal("not ready after the warm-up window")
	}
	l.wantLimit(100)
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(4, time.Millisecond, breaker.Failure, false) // every call dropped: halve
	l.wantLimit(50)
	l.lim.Recovered()
	l.wantLimit(100)
}
