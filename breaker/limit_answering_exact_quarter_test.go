package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// A window in which exactly a quarter of the calls succeeded still answers: the
// dependency is Answering at one success of four (at least a quarter, not more).
func TestLimitAnsweringAtExactlyAQuarter(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	slots := []breaker.LimitSlot{l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online)}
	l.clock.Advance(100 * time.Millisecond)
	l.lim.Release(slots[0], breaker.Success, false)
	for _, s := range slots[1:] {
		l.lim.Release(s, breaker.Failure, false) // the window closes with the fourth
	}
	l.wantLimit(62) // the window closed: 100 * (1 - 0.5*3/4), rounded down
	if !l.lim.Answering() {
		t.Fatal("not Answering after a window in which one call of four succeeded")
	}
}
