package admission_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
)

// The limiter in closed loops of calls, round by round: the shapes of traffic it was
// built for.

func TestLimitColdStartRefusesNothing(t *testing.T) {
	// 200 first publishes that all take 300ms (connections being opened) and then a
	// healthy 1ms broker: nothing is refused.
	l := newLimiter(t, admission.DefaultPolicy().Limit)
	if n := l.round(200, 1, admission.Online, 300*time.Millisecond, admission.Success); n != 0 {
		t.Fatalf("cold start: %d of 200 refused", n)
	}
	for i := range 100 {
		if n := l.round(200, 1, admission.Online, time.Millisecond, admission.Success); n != 0 {
			t.Fatalf("round %d after the cold start: %d of 200 refused (stats %+v)", i, n, l.stats())
		}
		l.clock.Advance(20 * time.Millisecond)
	}
	if s := l.stats(); !s.Ready || s.Baseline > 10*time.Millisecond {
		t.Fatalf("stats %+v: want a baseline near 1ms", s)
	}
}

func TestLimitSlownessInsideDeadlinesKeepsTheHealthyDemand(t *testing.T) {
	l := newLimiter(t, admission.DefaultPolicy().Limit)
	for range 50 {
		l.round(100, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(50 * time.Millisecond)
	}
	// The broker now answers in 20ms: latency alone contracts the limit, but never
	// below the 100 messages it carried while healthy (its healthy rate needs fewer
	// at 20ms).
	refused := 0
	for range 100 {
		refused += l.round(100, 1, admission.Online, 20*time.Millisecond, admission.Success)
	}
	if s := l.stats(); refused != 0 || s.Limit < 100 || s.Limit == 1000 {
		t.Fatalf("slow broker: %d refused, stats %+v: want none refused and a contracted limit >= 100", refused, s)
	}
}

func TestLimitDropsContractToMinAndRecoveryExploresUp(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 500, Min: 2})
	for range 30 {
		l.round(100, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
	// A hung broker: every call ends at its 500ms deadline (a drop).
	for range 20 {
		l.round(100, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
	}
	if s := l.stats(); s.Limit > 4 {
		t.Fatalf("after 20 windows of drops: limit %d, want near Min 2", s.Limit)
	}
	// Recovery: the limit explores up again while it is used.
	for range 40 {
		l.round(100, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
	if s := l.stats(); s.Limit < 100 {
		t.Fatalf("after recovery: limit %d, want back above the demand of 100", s.Limit)
	}
}

// A noisy destination (window means alternating 1ms and 3ms) is healthy: the
// baseline is not its luckiest window, so the limit neither contracts nor refuses.
func TestLimitNoisyLatencyIsNotPressure(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 200})
	for i := range 200 {
		lat := time.Millisecond
		if i%2 == 1 {
			lat = 3 * time.Millisecond
		}
		if n := l.round(20, 1, admission.Online, lat, admission.Success); n != 0 {
			t.Fatalf("round %d: %d refused", i, n)
		}
		l.clock.Advance(100 * time.Millisecond)
	}
	if s := l.stats(); s.Limit < 180 || s.BulkLimit < 50 {
		t.Fatalf("noisy but healthy: %+v, want the full limit and most of the bulk share", s)
	}
}

// A cold start whose first wave is dropped contracts the limit; answers without drops
// let it explore back up before the baseline exists.
func TestLimitExploresUpDuringWarmUp(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 400})
	l.round(200, 1, admission.Online, 500*time.Millisecond, admission.Dropped) // a cold first wave, all dropped
	l.round(200, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
	l.clock.Advance(100 * time.Millisecond)
	l.round(2, 1, admission.Online, 50*time.Millisecond, admission.Success) // closes the window of drops
	low := l.stats().Limit
	if low >= 400 || l.stats().Ready {
		t.Fatalf("after two dropped waves: %+v, want a contracted limit and no baseline", l.stats())
	}
	for range 3 { // slow answers, fewer than the baseline needs
		l.round(2, 1, admission.Online, 50*time.Millisecond, admission.Success)
		l.round(low, 1, admission.Online, 100*time.Millisecond, admission.Ignored) // in flight, cancelled
		l.clock.Advance(100 * time.Millisecond)
	}
	if got := l.stats(); got.Limit <= low {
		t.Fatalf("answers without drops during warm-up: limit %d, want above %d", got.Limit, low)
	}
}

// A broker slowed by a constant delay, every answer inside the callers' deadlines,
// keeps its goodput: 500 calls a second at 1ms keep about one call in flight, at
// 300ms about 150 (Little's law), and latency alone must not refuse them. Drops of a
// first wave (channels being opened at the slow pace) contract the limit; windows
// without drops give it back.
func TestLimitSlowButAnsweringKeepsItsThroughput(t *testing.T) {
	l := newLimiter(t, admission.DefaultPolicy().Limit)
	for range 300 { // 5 calls every 10ms at 1ms: 500 a second
		l.round(5, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(9 * time.Millisecond)
	}
	// 300ms: the first waves lose most calls to their deadlines.
	for range 3 {
		l.round(150, 1, admission.Online, 150*time.Millisecond, admission.Dropped)
		l.round(15, 1, admission.Online, 150*time.Millisecond, admission.Success)
	}
	if s := l.stats(); s.Limit >= 150 {
		t.Fatalf("after dropped waves: %+v, want the limit contracted below 150", s)
	}
	refused := 0
	for i := range 50 { // then 150 in flight, every answer in 300ms
		n := l.round(150, 1, admission.Online, 300*time.Millisecond, admission.Success)
		if i >= 10 {
			refused += n
		}
	}
	if s := l.stats(); refused != 0 {
		t.Fatalf("a slow broker answering every call: %d refused after 10 rounds (%+v), want none", refused, s)
	}
}
