package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// The probe cycle of a hung dependency (missed.go): a probe that misses its deadline
// reopens the circuit until one limit Window after the probe was admitted, and for at
// least a tenth of a Window, so a probe that waited out a deadline longer than the
// Window is followed by the next probe a tenth of a Window later, and the dependency
// almost always has a probe in flight to answer when it recovers.

func TestMissedProbeIsFollowedATenthOfAWindowLaterAfterAWindowInFlight(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.wantOpenFor(100 * time.Millisecond) // an opening from closed: one Window
	p := h.probeAfter(100 * time.Millisecond)
	for i := range 3 {
		h.clock.Advance(500 * time.Millisecond) // the probe waits out a 500ms deadline
		if !p.CompleteMissed(errMissedDeadline) {
			t.Fatalf("probe %d: CompleteMissed returned false", i)
		}
		// A tenth of a Window, not a Window: then the next probe; its sibling is
		// refused.
		h.wantOpenFor(10 * time.Millisecond)
		p = h.probeAfter(10 * time.Millisecond)
	}
	// A probe that misses exactly one Window after its admission: a tenth too.
	h.clock.Advance(100 * time.Millisecond)
	p.CompleteMissed(errMissedDeadline)
	h.wantOpenFor(10 * time.Millisecond)
	// One that misses sooner: open for the rest of the Window from its admission.
	p = h.probeAfter(10 * time.Millisecond)
	h.clock.Advance(80 * time.Millisecond)
	p.CompleteMissed(errMissedDeadline)
	h.wantOpenFor(20 * time.Millisecond)
	// A broker slow but answering within the deadline closes the circuit with the
	// next probe, which takes its time.
	p = h.probeAfter(20 * time.Millisecond)
	h.clock.Advance(300 * time.Millisecond)
	if !p.Complete(breaker.Success) {
		t.Fatal("a probe that answered in 300ms was not taken into account")
	}
	h.wantState(breaker.Closed)
	if got := h.reasons(); got[len(got)-1] != "half-open>closed:"+breaker.ReasonProbeSucceeded {
		t.Fatalf("last transition %v", got[len(got)-1])
	}
}

func TestMissedProbeErrorAnswerKeepsTheBreak(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	pr := h.probeAfter(100 * time.Millisecond)
	h.clock.Advance(500 * time.Millisecond) // in flight longer than a Window, but an error answer
	pr.Complete(breaker.Failure)
	h.wantOpenFor(20 * time.Second)
}

// The refusals of a half-open circuit probing a hung dependency say to come back in
// one Window, when the next probe may be admitted, not when the probe's lease
// (ProbeLease, here BreakDuration, 10s) or HalfOpenRetryDelay (1s) ends.
func TestMissedHalfOpenRefusalNamesTheNextWindow(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.probeAfter(100 * time.Millisecond)
	for range 2 {
		h.clock.Advance(250 * time.Millisecond)
		if got, want := h.rejected().NotBefore, h.clock.Now().Add(100*time.Millisecond); !got.Equal(want) {
			t.Fatalf("half-open refusal says come back in %v, want one Window (100ms)", got.Sub(h.clock.Now()))
		}
	}
	// A circuit opened by error answers keeps the lease in its refusals.
	e := newHarness(t, missedPolicy())
	e.acquire().Complete(breaker.Failure)
	e.acquire().Complete(breaker.Failure)
	e.probeAfter(10 * time.Second)
	e.clock.Advance(250 * time.Millisecond)
	if got, want := e.rejected().NotBefore, e.clock.Now().Add(10*time.Second-250*time.Millisecond); !got.Equal(want) {
		t.Fatalf("half-open refusal after error answers says come back in %v, want the lease's end (%v)", got.Sub(e.clock.Now()), want.Sub(e.clock.Now()))
	}
}
