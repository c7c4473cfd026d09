package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Busy counts the second after bulk work ended from when it was given back, not from
// when it was admitted: a bulk call held for two seconds keeps the limiter busy for a
// second after its release.
func TestLimiterBusyForASecondAfterALongBulkCallEnds(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	l.clock.Advance(time.Second)
	bulk := l.take(2, breaker.Bulk)
	l.clock.Advance(2 * time.Second)
	l.lim.Release(bulk, breaker.Neutral, false) // bulk work ends now, two seconds after it began
	l.clock.Advance(999 * time.Millisecond)
	l.lim.Release(l.take(1, breaker.Online), breaker.Success, false) // the dependency answers
	if !l.lim.Busy() {
		t.Fatal("not busy 999ms after a bulk call ended")
	}
	l.clock.Advance(time.Millisecond + 1)
	if l.lim.Busy() || !l.lim.Answered() {
		t.Fatalf("a second and 1ns after bulk work ended: busy %v answered %v, want false true", l.lim.Busy(), l.lim.Answered())
	}
}
