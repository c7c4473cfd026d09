package breaker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// timed makes n calls that each take took and complete with o.
func (h *harness) timed(n int, took time.Duration, o breaker.Outcome) {
	h.t.Helper()
	for range n {
		p := h.acquire()
		h.clock.Advance(took)
		p.Complete(o)
	}
}

// Slow successes are a rate of their own: they never add to the failure evidence,
// and FailureThreshold of them in a row open a consecutive circuit once it has a
// baseline.
func TestSlowCallsAreTheirOwnRun(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, SlowCallDuration: 100 * time.Millisecond})
	h.timed(10, 100*time.Millisecond, breaker.Success) // exactly at the limit is not slow: the baseline
	h.timed(2, 101*time.Millisecond, breaker.Success)
	h.wantFailures(0)
	h.timed(1, time.Millisecond, breaker.Success) // a fast success ends the run
	h.timed(2, time.Second, breaker.Success)
	h.call(breaker.Failure) // failures count apart
	h.wantFailures(1)
	h.wantState(breaker.Closed)
	h.timed(1, time.Second, breaker.Success)
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonSlowCalls {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonSlowCalls)
	}
}

// No start-up trips: 200 first calls that all take longer than SlowCallDuration
// (admitted before any completed) are never judged, nor are slow calls before ten
// fast successes have given the circuit a baseline.
func TestSlowCallsBeforeTheBaselineAreNotJudged(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, SlowCallDuration: 250 * time.Millisecond})
	var first []breaker.Permit
	for range 200 {
		first = append(first, h.acquire())
	}
	h.clock.Advance(400 * time.Millisecond)
	for _, p := range first {
		p.Complete(breaker.Success)
	}
	h.wantState(breaker.Closed)
	h.timed(9, time.Millisecond, breaker.Success)
	h.timed(20, time.Second, breaker.Success) // nine fast calls are no baseline yet
	h.wantState(breaker.Closed)
	h.timed(1, time.Millisecond, breaker.Success) // the tenth is
	h.timed(5, time.Second, breaker.Success)
	h.wantState(breaker.Open)
}

// Window mode: the slow share of the window's calls opens the circuit at
// SlowCallRatio, and leaves the failure ratio alone.
func TestSlowCallRateInAWindow(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute,
		MinimumCalls: 10, FailureRatio: 0.5, SlowCallDuration: 100 * time.Millisecond, SlowCallRatio: 0.5})
	h.timed(10, time.Millisecond, breaker.Success)
	h.timed(9, 200*time.Millisecond, breaker.Success) // 9 slow of 19
	h.wantState(breaker.Closed)
	h.wantFailures(0)
	h.timed(1, 200*time.Millisecond, breaker.Success) // 10 of 20
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonSlowCalls {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonSlowCalls)
	}
}

func TestSlowCallRatioValidation(t *testing.T) {
	for _, p := range []breaker.Policy{
		{SlowCallRatio: 1.5, FailureWindow: time.Second, SlowCallDuration: time.Second},
		{SlowCallRatio: 0.5, SlowCallDuration: time.Second},
		{SlowCallRatio: 0.5, FailureWindow: time.Second},
	} {
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "SlowCallRatio") {
			t.Errorf("%+v: %v, want an error naming SlowCallRatio", p, err)
		}
	}
}

// wantOpenedFor fails unless the last transition seen opened the circuit for reason.
func wantOpenedFor(h *harness, reason string) {
	h.t.Helper()
	if len(h.seen) == 0 {
		h.t.Fatalf("no transition seen, want an opening for %q", reason)
	}
	if tr := h.seen[len(h.seen)-1]; tr.To != breaker.Open || tr.Reason != reason {
		h.t.Fatalf("last transition %v>%v:%s, want >open:%s", tr.From, tr.To, tr.Reason, reason)
	}
}

// slowCallsOpenAt makes slow calls one by one: the first n-1 leave the circuit
// closed, the n-th opens it for slow calls.
func slowCallsOpenAt(h *harness, n int) {
	h.t.Helper()
	h.timed(n-1, time.Second, breaker.Success)
	h.wantState(breaker.Closed)
	h.timed(1, time.Second, breaker.Success)
	h.wantState(breaker.Open)
	wantOpenedFor(h, breaker.ReasonSlowCalls)
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
	wantOpenedFor(h, breaker.ReasonSlowCalls)
}

// An opening by slow calls ends their run: after the circuit recovers, it takes
// FailureThreshold new slow calls in a row to open it again.
func TestSlowRunStartsAfreshAfterItOpened(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, SlowCallDuration: 100 * time.Millisecond})
	h.timed(10, time.Millisecond, breaker.Success)
	h.timed(3, time.Second, breaker.Success)
	h.wantState(breaker.Open)
	wantOpenedFor(h, breaker.ReasonSlowCalls)
	if oe := h.rejected(); !oe.NotBefore.Equal(h.clock.Now().Add(time.Second)) {
		t.Fatalf("NotBefore %v, want one BreakDuration after the opening", oe.NotBefore)
	}
	h.clock.Advance(time.Second)
	h.call(breaker.Success) // the probe
	h.wantState(breaker.Closed)
	slowCallsOpenAt(h, 3)
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
	wantOpenedFor(h, breaker.ReasonSlowCalls)
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
	slowCallsOpenAt(h, 3)
}

// Rare traffic: the run of failures opens the circuit when it began at least one
// FailureWindow ago (exactly one is enough), counted from its first failure, or when
// its pace would bring fewer than MinimumCalls calls into a whole window (as many is
// not fewer); and the window must hold fewer than MinimumCalls calls.
func TestRareTrafficAtItsExactBounds(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 20}
	newRare := func(t *testing.T, p breaker.Policy) *harness {
		h := newHarness(t, p)
		h.clock.Advance(time.Hour) // the run does not begin at the circuit's epoch
		return h
	}
	// Three failures with these gaps: over one window exactly; two gaps over 6 s, a
	// pace at which a 60 s window holds 20 calls; and a pace a nanosecond slower.
	for _, c := range []struct {
		name string
		gap  [2]time.Duration
		open bool
	}{
		{"one window exactly", [2]time.Duration{30 * time.Second, 30 * time.Second}, true},
		{"a pace that fills the window exactly", [2]time.Duration{3 * time.Second, 3 * time.Second}, false},
		{"a pace a nanosecond slower", [2]time.Duration{3 * time.Second, 3*time.Second + 1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newRare(t, p)
			h.call(breaker.Failure)
			for _, gap := range c.gap {
				h.clock.Advance(gap)
				h.call(breaker.Failure)
			}
			if !c.open {
				h.wantState(breaker.Closed)
				return
			}
			h.wantState(breaker.Open)
			wantOpenedFor(h, breaker.ReasonRareTraffic)
		})
	}
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
		wantOpenedFor(h, breaker.ReasonFailureWindow)
	})
}
