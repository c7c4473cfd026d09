package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// mb3Quiet runs n healthy windows of one call in flight at a time (1ms each, the
// window closing at its fourth completion): a quiet dependency.
func (l *brkLimiter) mb3Quiet(n int) {
	l.t.Helper()
	for range n {
		l.clock.Advance(97 * time.Millisecond)
		for range 4 {
			l.brkRelease(1, time.Millisecond, breaker.Success, false)
		}
	}
}

// mb3Busy warms a limiter of Max 100 up with 50 calls in flight: a busy dependency
// whose healthy demand, rate and peak the limit remembers.
func mb3Busy(t *testing.T) *brkLimiter {
	t.Helper()
	l := mb2Ready(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 50, time.Millisecond) // baseline 1ms
	for range 3 {
		l.clock.Advance(99 * time.Millisecond)
		l.brkRelease(50, time.Millisecond, breaker.Success, false)
	}
	l.wantLimit(100)
	return l
}

// What the limit remembers of a busy period (the peak in flight and the rate of
// successes of its healthy windows, which floor a contraction by latency) fades by a
// hundredth a window: after 300 quiet windows, windows fifty times slower than the
// baseline contract the limit (to 54 in ten windows, the baseline following the
// latency), where a busy period still remembered would hold it at 100.
func TestLimitForgetsAnOldBusyPeriodWhenLatencyRises(t *testing.T) {
	l := mb3Busy(t)
	l.mb3Quiet(300)
	l.wantLimit(100) // quiet windows do not explore past a limit they do not use
	for range 10 {
		l.clock.Advance(50 * time.Millisecond)
		l.brkRelease(4, 50*time.Millisecond, breaker.Success, false)
	}
	if got := l.lim.Stats().Limit; got >= 70 {
		t.Fatalf("limit %d after ten slow windows, want it contracted below 70", got)
	}
}

// The limit explores while it is used up to twice the demand of recent windows, a
// peak that fades by a hundredth a window: after a quiet period and drops that
// contracted it, it explores back to twice the 11 calls in flight that use it now, and
// not past it (an old busy peak still remembered would let it overshoot to 26).
func TestLimitExploresToTwiceTheRecentDemand(t *testing.T) {
	l := mb3Busy(t)
	l.mb3Quiet(300)
	for i := 0; l.lim.Stats().Limit > 15; i++ { // windows of drops contract the limit
		if i == 20 {
			t.Fatalf("limit %d after 20 windows of drops", l.lim.Stats().Limit)
		}
		l.clock.Advance(100 * time.Millisecond)
		l.brkRelease(4, time.Millisecond, breaker.Failure, false)
	}
	for range 6 { // windows with 11 in flight: the limit is used while it is at most 22
		l.clock.Advance(99 * time.Millisecond)
		l.brkRelease(11, time.Millisecond, breaker.Success, false)
	}
	l.wantLimit(22)
}
