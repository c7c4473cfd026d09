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
