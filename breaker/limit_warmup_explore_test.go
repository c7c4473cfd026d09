package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Before the baseline exists, a window without drops explores the limit back up when
// online calls answered and used at least half of it (exactly half counts); a window in
// which only bulk work answered does not, however much bulk work it held.
func TestLimitWarmUpExploresOnOnlineAnswersUsingHalf(t *testing.T) {
	p := breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}
	t.Run("online answers, exactly half used", func(t *testing.T) {
		l := newBrkLimiter(t, p)
		l.clock.Advance(100 * time.Millisecond)
		l.brkRelease(4, time.Millisecond, breaker.Failure, false)
		l.wantLimit(50)
		l.clock.Advance(100 * time.Millisecond)
		l.brkRelease(25, time.Millisecond, breaker.Success, false) // 25 of 50 in flight
		l.wantLimit(57)                                            // 50 + sqrt(50)
	})
	t.Run("bulk answers only", func(t *testing.T) {
		l := newBrkLimiter(t, p)
		var bulk []breaker.LimitSlot
		for range 4 {
			bulk = append(bulk, l.take(7, breaker.Bulk)) // held across the next window's close
		}
		l.clock.Advance(100 * time.Millisecond)
		l.brkRelease(4, time.Millisecond, breaker.Failure, false)
		l.wantLimit(50)
		if l.lim.Stats().Ready {
			t.Fatal("ready without a success")
		}
		l.clock.Advance(100 * time.Millisecond)
		for _, s := range bulk { // 28 of 50 in flight; the window closes with the fourth
			l.lim.Release(s, breaker.Success, false)
		}
		l.wantLimit(50)
	})
}
