package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// brkRelease takes n online slots now, lets latency pass, and gives them back with
// outcome o (dropped: as calls ended by their deadline).
func (l *brkLimiter) brkRelease(n int, latency time.Duration, o breaker.Outcome, dropped bool) {
	l.t.Helper()
	var slots []breaker.LimitSlot
	for range n {
		slots = append(slots, l.take(1, breaker.Online))
	}
	l.clock.Advance(latency)
	for _, s := range slots {
		l.lim.Release(s, o, dropped)
	}
}

func (l *brkLimiter) wantLimit(want int) {
	l.t.Helper()
	if got := l.lim.Stats().Limit; got != want {
		l.t.Fatalf("limit %d, want %d", got, want)
	}
}

// A window of the limit closes (and the limit moves) at the first completion at least
// Window after it opened once it holds 4 completions with a verdict, or at the first
// one at least 10 Windows after it opened however few it holds.
func TestLimitWindowClosesAtItsExactBounds(t *testing.T) {
	p := breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}
	t.Run("one Window with 4 completions", func(t *testing.T) {
		l := newBrkLimiter(t, p)
		l.brkRelease(4, 100*time.Millisecond-1, breaker.Failure, false)
		l.wantLimit(100)
		l.brkRelease(1, 1, breaker.Failure, false) // 5 failures of 5: halve
		l.wantLimit(50)
	})
	t.Run("the fourth completion", func(t *testing.T) {
		l := newBrkLimiter(t, p)
		slots := []breaker.LimitSlot{l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online), l.take(1, breaker.Online)}
		l.clock.Advance(100 * time.Millisecond)
		for _, s := range slots[:3] {
			l.lim.Release(s, breaker.Failure, false)
		}
		l.wantLimit(100)
		l.lim.Release(slots[3], breaker.Failure, false)
		l.wantLimit(50)
	})
	t.Run("ten Windows with fewer", func(t *testing.T) {
		l := newBrkLimiter(t, p)
		a, b := l.take(1, breaker.Online), l.take(1, breaker.Online)
		l.clock.Advance(time.Second - 1)
		l.lim.Release(a, breaker.Failure, false)
		l.wantLimit(100)
		l.clock.Advance(1)
		l.lim.Release(b, breaker.Failure, false)
		l.wantLimit(50)
	})
}

// Drops contract the limit in proportion to their share of the window's completions
// (half of it when all of them were drops), never below Min; a window of answers
// while the limit is used at least half explores back up by its square root.
func TestLimitDropsContractByTheirShareAndAnswersExploreBack(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	var slots []breaker.LimitSlot
	for range 4 {
		slots = append(slots, l.take(1, breaker.Online))
	}
	l.clock.Advance(100 * time.Millisecond)
	l.lim.Release(slots[0], breaker.Neutral, true) // a deadline: a drop
	for _, s := range slots[1:] {
		l.lim.Release(s, breaker.Success, false)
	}
	l.wantLimit(87) // 100 * (1 - 0.5*1/4)
	l.brkRelease(21, 100*time.Millisecond, breaker.Success, false)
	l.wantLimit(87) // 21 in flight is less than half of 87.5: no exploring
	l.brkRelease(44, 100*time.Millisecond, breaker.Success, false)
	l.wantLimit(96) // 87.5 + sqrt(87.5)

	floor := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Min: 60, Window: 100 * time.Millisecond})
	floor.brkRelease(4, 100*time.Millisecond, breaker.Failure, false)
	floor.wantLimit(60)
}

// The baseline is the mean latency of the first ten online successes measured; later
// windows move it by a twentieth of their difference, or halfway at once toward a
// latency under half of it. A refused caller is told to wait the recent latency.
func TestLimitBaselineLearnsThenFollows(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	want := func(baseline, recent time.Duration) {
		t.Helper()
		s := l.lim.Stats()
		if !s.Ready || s.Baseline != baseline || s.Recent != recent || l.lim.RetryAfter() != recent {
			t.Fatalf("%+v, RetryAfter %v; want ready, baseline %v, recent and RetryAfter %v", s, l.lim.RetryAfter(), baseline, recent)
		}
	}
	l.brkRelease(10, 4*time.Millisecond, breaker.Success, false)
	if l.lim.Stats().Ready {
		t.Fatal("ready before the window closed")
	}
	l.clock.Advance(100 * time.Millisecond)
	l.brkRelease(1, 0, breaker.Failure, false) // closes the window: ten samples of 4ms
	want(4*time.Millisecond, 4*time.Millisecond)
	l.clock.Advance(93 * time.Millisecond)
	l.brkRelease(4, 7*time.Millisecond, breaker.Success, false)
	want(4*time.Millisecond+3*time.Millisecond/20, 7*time.Millisecond)
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(4, time.Millisecond, breaker.Success, false) // under half the baseline
	want((4*time.Millisecond+3*time.Millisecond/20+time.Millisecond)/2, time.Millisecond)
}

// Past Tolerance times the baseline the limit contracts smoothly: a fifth of the way
// to limit*gradient + sqrt(limit), the gradient Tolerance*baseline/latency held
// within [0.5, 1]. A healthy window then explores up by the square root while the
// limit is used, but no further than twice the demand seen.
func TestLimitSlowWindowsContractSmoothlyAndExploringStopsAtTwiceTheDemand(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	l.brkRelease(10, time.Millisecond, breaker.Success, false)
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(1, time.Millisecond, breaker.Success, false) // baseline 1ms, demand 10
	if s := l.lim.Stats(); !s.Ready || s.Baseline != time.Millisecond {
		t.Fatalf("%+v, want a 1ms baseline", s)
	}
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(92) // 100*0.8 + (100*0.5 + sqrt(100))*0.2
	l.clock.Advance(90 * time.Millisecond)
	l.brkRelease(4, 10*time.Millisecond, breaker.Success, false)
	l.wantLimit(84) // 92*0.8 + (92*0.5 + sqrt(92))*0.2 = 84.7
	l.clock.Advance(98 * time.Millisecond)
	l.brkRelease(43, 2*time.Millisecond, breaker.Success, false)
	l.wantLimit(86) // 84.7 + sqrt(84.7), held to twice the demand of 43
}

// Latency alone never holds the limit below twice what the healthy rate of successes
// keeps in flight at the recent latency (Little's law): after drops took it lower, a
// slow window without drops doubles it back toward that need.
func TestLimitSlowWindowsDoubleBackToTheHealthyRatesNeed(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	l.brkRelease(10, time.Millisecond, breaker.Success, false)
	l.clock.Advance(99 * time.Millisecond)
	l.brkRelease(1, time.Millisecond, breaker.Success, false) // baseline 1ms
	l.clock.Advance(time.Millisecond)
	l.brkRelease(39, time.Millisecond, breaker.Success, false)
	l.clock.Advance(97 * time.Millisecond)
	l.brkRelease(1, time.Millisecond, breaker.Success, false) // healthy: 40 successes in 100ms
	l.wantLimit(100)
	for _, want := range []int{50, 25, 12} {
		l.clock.Advance(99 * time.Millisecond)
		l.brkRelease(4, time.Millisecond, breaker.Failure, false)
		l.wantLimit(want)
	}
	// need = 2 * 40/100ms * 50ms = 40 messages
	for _, want := range []int{25, 40, 40} {
		l.clock.Advance(50 * time.Millisecond)
		l.brkRelease(4, 50*time.Millisecond, breaker.Success, false)
		l.wantLimit(want)
	}
}
