package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// brkLastReason fails unless the last transition seen opened the circuit for reason.
func brkLastReason(h *harness, reason string) {
	h.t.Helper()
	if len(h.seen) == 0 {
		h.t.Fatalf("no transition seen, want an opening for %q", reason)
	}
	if tr := h.seen[len(h.seen)-1]; tr.To != breaker.Open || tr.Reason != reason {
		h.t.Fatalf("last transition %v>%v:%s, want >open:%s", tr.From, tr.To, tr.Reason, reason)
	}
}

// brkSlowCallsOpenAt makes slow calls one by one: the first n-1 leave the circuit
// closed, the n-th opens it for slow calls.
func brkSlowCallsOpenAt(h *harness, n int) {
	h.t.Helper()
	h.timed(n-1, time.Second, breaker.Success)
	h.wantState(breaker.Closed)
	h.timed(1, time.Second, breaker.Success)
	h.wantState(breaker.Open)
	brkLastReason(h, breaker.ReasonSlowCalls)
}

// The latency baseline exists from the instant the tenth fast success completed: a
// call admitted one nanosecond before it is never judged slow, one admitted at that
// very instant is.
func TestSlowBaselineStartsAtTheTenthFastSuccess(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, SlowCallDuration: 100 * time.Millisecond})
	h.timed(9, time.Millisecond, breaker.Success)
	tenth := h.acquire()
	h.clock.Advance(time.Millisecond - 1)
	before := h.acquire()
	h.clock.Advance(1)
	tenth.Complete(breaker.Success) // the baseline, now
	at := h.acquire()
	h.clock.Advance(time.Second)
	before.Complete(breaker.Success) // slow, but admitted before the baseline
	h.wantState(breaker.Closed)
	at.Complete(breaker.Success)
	h.wantState(breaker.Open)
	brkLastReason(h, breaker.ReasonSlowCalls)
}

// An opening by slow calls ends their run: after the circuit recovers, it takes
// FailureThreshold new slow calls in a row to open it again.
func TestSlowRunStartsAfreshAfterItOpened(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, SlowCallDuration: 100 * time.Millisecond})
	h.timed(10, time.Millisecond, breaker.Success)
	h.timed(3, time.Second, breaker.Success)
	h.wantState(breaker.Open)
	brkLastReason(h, breaker.ReasonSlowCalls)
	if oe := h.rejected(); !oe.NotBefore.Equal(h.clock.Now().Add(time.Second)) {
		t.Fatalf("NotBefore %v, want one BreakDuration after the opening", oe.NotBefore)
	}
	h.clock.Advance(time.Second)
	h.call(breaker.Success) // the probe
	h.wantState(breaker.Closed)
	brkSlowCallsOpenAt(h, 3)
}

// Window mode opens for slow calls when all three bounds are met at once, each
// exactly: FailureThreshold slow calls, MinimumCalls calls, and slow/calls equal to
// SlowCallRatio. One call earlier none of them is.
func TestSlowRateOpensAtItsExactBounds(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 10, BreakDuration: time.Second, FailureWindow: time.Hour,
		MinimumCalls: 20, SlowCallDuration: 100 * time.Millisecond, SlowCallRatio: 0.5})
	h.timed(10, time.Millisecond, breaker.Success)
	h.timed(9, time.Second, breaker.Success)
	h.wantState(breaker.Closed)
	h.timed(1, time.Second, breaker.Success) // 10 slow of 20
	h.wantState(breaker.Open)
	brkLastReason(h, breaker.ReasonSlowCalls)
	if oe := h.rejected(); !oe.NotBefore.Equal(h.clock.Now().Add(time.Second)) {
		t.Fatalf("NotBefore %v, want one BreakDuration after the opening", oe.NotBefore)
	}
}

// A SlowCallRatio of 0 means every call of the window slow: fast calls in the
// window keep it closed however many slow ones follow; once they have left the
// window, FailureThreshold slow calls open it.
func TestSlowRatioZeroMeansEveryCall(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute,
		SlowCallDuration: 100 * time.Millisecond})
	h.timed(10, time.Millisecond, breaker.Success)
	h.timed(5, time.Second, breaker.Success)
	h.wantState(breaker.Closed)
	h.clock.Advance(2 * time.Minute)
	brkSlowCallsOpenAt(h, 3)
}

// Rare traffic: the run of failures must have begun at least one FailureWindow ago
// (exactly one is enough), counted from its first failure, and the window must hold
// fewer than MinimumCalls calls (as many is not fewer).
func TestRareTrafficAtItsExactBounds(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 20}
	newRare := func(t *testing.T, p breaker.Policy) *harness {
		h := newHarness(t, p)
		h.clock.Advance(time.Hour) // the run does not begin at the circuit's epoch
		return h
	}
	t.Run("one window exactly", func(t *testing.T) {
		h := newRare(t, p)
		h.call(breaker.Failure)
		h.clock.Advance(30 * time.Second)
		h.call(breaker.Failure)
		h.clock.Advance(30 * time.Second)
		h.call(breaker.Failure)
		h.wantState(breaker.Open)
		brkLastReason(h, breaker.ReasonRareTraffic)
	})
	t.Run("a nanosecond short", func(t *testing.T) {
		h := newRare(t, p)
		h.call(breaker.Failure)
		h.clock.Advance(30 * time.Second)
		h.call(breaker.Failure)
		h.clock.Advance(30*time.Second - 1)
		h.call(breaker.Failure)
		h.wantState(breaker.Closed)
	})
	t.Run("too few failures", func(t *testing.T) {
		h := newRare(t, p)
		h.call(breaker.Failure)
		h.clock.Advance(5 * time.Minute)
		h.call(breaker.Failure)
		h.wantState(breaker.Closed)
	})
	t.Run("as many calls as MinimumCalls", func(t *testing.T) {
		q := p
		q.MinimumCalls = 2
		h := newRare(t, q)
		h.call(breaker.Failure)
		h.clock.Advance(5 * time.Minute) // the first failure leaves the window
		h.call(breaker.Failure)
		h.clock.Advance(time.Second)
		h.call(breaker.Failure) // two calls in the window, two failures: below the threshold
		h.wantState(breaker.Closed)
		h.clock.Advance(time.Second)
		h.call(breaker.Failure) // three of three: the window opens it
		h.wantState(breaker.Open)
		brkLastReason(h, breaker.ReasonFailureWindow)
	})
}
