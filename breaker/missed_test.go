package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

var errMissedDeadline = errors.New("context deadline exceeded")

// missedPolicy opens after 2 failures for 10s, doubling per failed probe up to 80s,
// with an adaptive limit whose Window is 100ms.
func missedPolicy() breaker.Policy {
	return breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, MaxBreakDuration: 80 * time.Second,
		Limit: breaker.LimitPolicy{Max: 10, Window: 100 * time.Millisecond}}
}

// wantOpenFor asserts that the circuit is open until exactly d from now: refused now,
// and NotBefore says so.
func (h *harness) wantOpenFor(d time.Duration) {
	h.t.Helper()
	h.wantState(breaker.Open)
	if got, want := h.rejected().NotBefore, h.clock.Now().Add(d); !got.Equal(want) {
		h.t.Fatalf("open until %v, want %v (a break of %v)", got.Sub(h.clock.Now()), d, d)
	}
}

// probe advances to the end of the break and takes the probe; a sibling is refused.
func (h *harness) probeAfter(brk time.Duration) breaker.Permit {
	h.t.Helper()
	h.clock.Advance(brk)
	p := h.acquire()
	if !p.Probe() {
		h.t.Fatalf("the first call after the break is not a probe (state %v)", h.b.State())
	}
	h.rejected() // one probe at a time
	return p
}

func TestMissedDeadlineOpensForOneWindowAndProbesAgain(t *testing.T) {
	h := newHarness(t, missedPolicy())
	for range 2 {
		if !h.acquire().CompleteMissed(errMissedDeadline) {
			t.Fatal("CompleteMissed of a fresh permit returned false")
		}
	}
	h.wantOpenFor(100 * time.Millisecond)
	if s := h.b.Snapshot(); s.LastError != errMissedDeadline.Error() || s.Limit.InFlight != 0 {
		t.Fatalf("LastError %q, limit in flight %d: want the error kept and the slots back", s.LastError, s.Limit.InFlight)
	}
	wait := 100 * time.Millisecond
	for i := range 4 { // a hung dependency: every probe misses, the break never grows
		p := h.probeAfter(wait)
		// A probe that missed 40ms after it was admitted (a short deadline): open
		// until one Window after its admission (missed_probe_test.go).
		h.clock.Advance(40 * time.Millisecond)
		if !p.CompleteMissed(errMissedDeadline) {
			t.Fatalf("probe %d: CompleteMissed returned false", i)
		}
		wait = 60 * time.Millisecond
		h.wantOpenFor(wait)
		if got := h.b.Snapshot().FailedProbes; got != i+1 {
			t.Fatalf("FailedProbes %d, want %d", got, i+1)
		}
	}
	// An error answer after the misses: the break, doubled once (the misses do not
	// count toward the doubling).
	h.probeAfter(wait).CompleteWith(breaker.Failure, errors.New("connection refused"))
	h.wantOpenFor(20 * time.Second)
	// A missed probe after it: back to one Window.
	h.probeAfter(20 * time.Second).CompleteMissed(nil)
	h.wantOpenFor(100 * time.Millisecond)
	h.probeAfter(100 * time.Millisecond).Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.FailedProbes != 0 {
		t.Fatalf("FailedProbes %d after closing, want 0", s.FailedProbes)
	}
	// The error count restarts with the outage: an error opening breaks 10s, its
	// failed probe 20s.
	h.acquire().CompleteWith(breaker.Failure, errors.New("connection refused"))
	h.acquire().Complete(breaker.Failure)
	h.wantOpenFor(10 * time.Second)
	h.probeAfter(10 * time.Second).Complete(breaker.Failure)
	h.wantOpenFor(20 * time.Second)
}

func TestMissedDeadlineKeepsTheBreakWithoutALimit(t *testing.T) {
	p := missedPolicy()
	p.Limit = breaker.LimitPolicy{}
	h := newHarness(t, p)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.wantOpenFor(10 * time.Second)
	h.probeAfter(10 * time.Second).CompleteMissed(errMissedDeadline)
	h.wantOpenFor(20 * time.Second)
}

func TestMissedDeadlineOfAStalePermitChangesNothing(t *testing.T) {
	h := newHarness(t, missedPolicy())
	old := h.acquire()
	h.acquire().Complete(breaker.Failure)
	h.acquire().Complete(breaker.Failure)
	h.wantOpenFor(10 * time.Second)
	if old.CompleteMissed(errMissedDeadline) {
		t.Fatal("CompleteMissed of a permit of an earlier generation returned true")
	}
	h.wantOpenFor(10 * time.Second)
	if old.CompleteMissed(errMissedDeadline) || h.b.Snapshot().Limit.InFlight != 0 {
		t.Fatal("a second completion counted, or the limit's slot was not given back once")
	}
	// A probe whose lease ran out is stale too: its miss does not shorten the break.
	p := h.probeAfter(10 * time.Second)
	h.clock.Advance(10 * time.Second) // ProbeLease is BreakDuration
	if p.CompleteMissed(errMissedDeadline) {
		t.Fatal("CompleteMissed of a probe past its lease returned true")
	}
	h.wantState(breaker.HalfOpen)
}

func TestMissedDeadlineInWindowMode(t *testing.T) {
	p := missedPolicy()
	p.FailureWindow, p.MinimumCalls = 10*time.Second, 2
	h := newHarness(t, p)
	h.acquire().Complete(breaker.Failure)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.wantOpenFor(100 * time.Millisecond)
	if got := h.reasons(); len(got) != 1 || got[0] != "closed>open:"+breaker.ReasonFailureWindow {
		t.Fatalf("transitions %v", got)
	}
}

// missedCompleter records what a backend's permit is completed with.
type missedCompleter struct {
	o   breaker.Outcome
	err error
}

func (c *missedCompleter) CompletePermit(_ breaker.PermitInfo, o breaker.Outcome) bool {
	c.o = o
	return true
}

func (c *missedCompleter) CompletePermitWith(_ breaker.PermitInfo, o breaker.Outcome, err error) bool {
	c.o, c.err = o, err
	return true
}

func TestMissedDeadlineOfABackendPermitIsAFailureWithItsError(t *testing.T) {
	c := &missedCompleter{}
	if !breaker.NewPermit(c, breaker.PermitInfo{Generation: 3}).CompleteMissed(errMissedDeadline) || c.o != breaker.Failure || c.err != errMissedDeadline {
		t.Fatalf("backend got %v, %v; want a Failure with the error", c.o, c.err)
	}
}
