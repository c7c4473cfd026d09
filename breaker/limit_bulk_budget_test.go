package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// brkBulkWindow takes bulk calls of the given weights and three online calls, gives
// all back but the last online call, lets a Window pass and gives that one back with
// outcome o, closing the window with every completion in it.
func (l *brkLimiter) brkBulkWindow(o breaker.Outcome, weights ...int) {
	l.t.Helper()
	var slots []breaker.LimitSlot
	for _, w := range weights {
		slots = append(slots, l.take(w, breaker.Bulk))
	}
	online := []breaker.LimitSlot{l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online)}
	for _, s := range append(slots, online[:2]...) {
		l.lim.Release(s, breaker.Success, false)
	}
	l.clock.Advance(100 * time.Millisecond)
	l.lim.Release(online[2], o, false)
}

func (l *brkLimiter) wantBulkLimit(want int) {
	l.t.Helper()
	if got := l.lim.Stats().BulkLimit; got != want {
		l.t.Fatalf("bulk limit %d, want %d", got, want)
	}
}

// The bulk budget starts at BulkShare of Max, halves in a window with drops (never
// below 1), and grows by its square root in a window in which bulk work held at least
// half of it (not in one that held less), up to where it started; a budget that grew
// wakes bulk callers waiting for headroom.
func TestBulkBudgetHalvesOnDropsAndGrowsWhenUsed(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.wantBulkLimit(50)
	l.brkBulkWindow(breaker.Failure, 1, 1, 1)
	l.wantBulkLimit(25)
	l.brkBulkWindow(breaker.Success, 4, 4, 4) // 12 of 25: less than half
	l.wantBulkLimit(25)
	wake := l.lim.BulkWake()
	l.brkBulkWindow(breaker.Success, 5, 4, 4) // 13 of 25
	l.wantBulkLimit(30)
	select {
	case <-wake:
	default:
		t.Fatal("a budget that grew woke no bulk caller")
	}
	for range 6 {
		l.brkBulkWindow(breaker.Failure, 1)
	}
	l.wantBulkLimit(1)
	if got := l.lim.BulkHeadroom(); got != 1 {
		t.Fatalf("headroom %d at the floor, want 1", got)
	}
	for range 30 {
		l.brkBulkWindow(breaker.Success, max(l.lim.BulkHeadroom(), 1))
	}
	l.wantBulkLimit(50)
}

// The limit learns the online calls' deadline from the latency of those dropped (the
// first drops set it, later ones move it a quarter of the way), and bulk work gives
// way while online latency is past 40 % of it: the budget shrinks by target/latency
// (by half at most), and grows more slowly as online latency nears the target.
func TestBulkBudgetFollowsTheLearnedOnlineDeadline(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.brkRelease(10, time.Millisecond, breaker.Success, false)
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(1, 0, breaker.Success, false) // the baseline
	if !l.lim.Stats().Ready {
		t.Fatal("no baseline after eleven successes")
	}
	l.brkRelease(4, 100*time.Millisecond, breaker.Neutral, true) // deadline 100ms, target 40ms
	l.wantBulkLimit(25)
	l.clock.Advance(50 * time.Millisecond)
	l.brkRelease(4, 50*time.Millisecond, breaker.Success, false) // 50ms > 40ms: 25 * 40/50
	l.wantBulkLimit(20)
	l.clock.Advance(80 * time.Millisecond)
	bulk := l.take(10, breaker.Bulk)
	l.brkRelease(4, 20*time.Millisecond, breaker.Success, false) // used, at half the target: 20 + sqrt(20)/2
	l.wantBulkLimit(22)
	l.lim.Release(bulk, breaker.Neutral, false) // no verdict: it does not count in the next window
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(4, 200*time.Millisecond, breaker.Neutral, true) // deadline 125ms, target 50ms; halved
	l.wantBulkLimit(11)
	l.clock.Advance(37500 * time.Microsecond)
	l.brkRelease(4, 62500*time.Microsecond, breaker.Success, false) // 11.1 * 50/62.5
	l.wantBulkLimit(8)
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(4, 100*time.Millisecond, breaker.Success, false) // 50/100: by half at most
	l.wantBulkLimit(4)
}
