package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

var errMissedDeadline = errors.New("context deadline exceeded")

// missedPolicy opens after 2 failures for 1s, doubling per probe failed with an error
// up to 8s; a probe's lease (10s) outlasts every deadline below.
func missedPolicy() breaker.Policy {
	return breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, MaxBreakDuration: 8 * time.Second, ProbeLease: 10 * time.Second}
}

// wantOpenFor asserts that the circuit is open until exactly d from now: refused now,
// and NotBefore says so.
func (h *harness) wantOpenFor(d time.Duration) {
	h.t.Helper()
	h.wantState(breaker.Open)
	if got, want := h.rejected().NotBefore, h.clock.Now().Add(d); !got.Equal(want) {
		h.t.Fatalf("open until %v from now, want %v", got.Sub(h.clock.Now()), d)
	}
}

// probeAfter advances to the end of the break and takes the probe; a sibling is refused.
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

// A failed probe reopens the circuit until a break after the probe was admitted, and
// at least a tenth of BreakDuration after it failed: a broker answering with errors is
// probed once per break, a hung one back to back, one call at a time. Probes that
// missed their deadlines never lengthen the break; probes failed with an error double
// it (MaxBreakDuration), also for the misses that follow.
func TestFailedProbeReopensABreakAfterItsAdmission(t *testing.T) {
	h := newHarness(t, missedPolicy())
	for range 2 {
		if !h.acquire().CompleteMissed(errMissedDeadline) {
			t.Fatal("CompleteMissed of a fresh permit returned false")
		}
	}
	h.wantOpenFor(time.Second) // an opening from closed: a break from now
	if s := h.b.Snapshot(); s.LastError != errMissedDeadline.Error() {
		t.Fatalf("LastError %q, want the missed deadline's", s.LastError)
	}
	wait := time.Second
	for i, c := range []struct {
		inFlight, reopen time.Duration
	}{
		{1500 * time.Millisecond, 100 * time.Millisecond}, // past the break: a tenth of it later
		{1500 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},            // exactly a break
		{950 * time.Millisecond, 100 * time.Millisecond}, // the rest of the break is shorter than the gap
		{400 * time.Millisecond, 600 * time.Millisecond}, // the rest of the break from its admission
		{40 * time.Millisecond, 960 * time.Millisecond},  // a short deadline
		{0, time.Second}, // missed at once
		{1500 * time.Millisecond, 100 * time.Millisecond},          // and back to a hung broker
		{2 * time.Second, 100 * time.Millisecond},                  // never doubling
		{8*time.Second + time.Millisecond, 100 * time.Millisecond}, // nor waiting past the gap
	} {
		p := h.probeAfter(wait)
		h.clock.Advance(c.inFlight)
		if !p.CompleteMissed(errMissedDeadline) {
			t.Fatalf("probe %d: CompleteMissed returned false", i)
		}
		h.wantOpenFor(c.reopen)
		if got := h.b.Snapshot().FailedProbes; got != i+1 {
			t.Fatalf("FailedProbes %d, want %d", got, i+1)
		}
		wait = c.reopen
	}
	// An error answer 40ms after its admission: the break, doubled once, from the
	// admission.
	p := h.probeAfter(wait)
	h.clock.Advance(40 * time.Millisecond)
	p.CompleteWith(breaker.Failure, errors.New("connection refused"))
	h.wantOpenFor(2*time.Second - 40*time.Millisecond)
	// A miss after it keeps the doubled break but does not double it again.
	p = h.probeAfter(2*time.Second - 40*time.Millisecond)
	h.clock.Advance(40 * time.Millisecond)
	p.CompleteMissed(nil)
	h.wantOpenFor(2*time.Second - 40*time.Millisecond)
	h.probeAfter(2*time.Second - 40*time.Millisecond).Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.FailedProbes != 0 {
		t.Fatalf("FailedProbes %d after closing, want 0", s.FailedProbes)
	}
	// The error count restarts with the outage: an error opening breaks 1s, its
	// failed probe 2s.
	h.acquire().CompleteWith(breaker.Failure, errors.New("connection refused"))
	h.acquire().Complete(breaker.Failure)
	h.wantOpenFor(time.Second)
	h.probeAfter(time.Second).Complete(breaker.Failure)
	h.wantOpenFor(2 * time.Second)
}

// An opening from closed breaks from now, however long ago the call that opened it
// was admitted.
func TestMissedOpeningFromClosedBreaksFromNow(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	p := h.acquire()
	h.clock.Advance(5 * time.Second)
	p.CompleteMissed(errMissedDeadline)
	h.wantOpenFor(time.Second)
}

// A broker slow but answering within its callers' deadline closes the circuit with
// the probe that waited for it.
func TestSlowProbeAnswerCloses(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	p := h.probeAfter(time.Second)
	h.clock.Advance(3 * time.Second)
	if !p.Complete(breaker.Success) {
		t.Fatal("a probe that answered in 3s was not taken into account")
	}
	h.wantState(breaker.Closed)
	if got := h.reasons(); got[len(got)-1] != "half-open>closed:"+breaker.ReasonProbeSucceeded {
		t.Fatalf("last transition %v", got[len(got)-1])
	}
}

// The refusals of a half-open circuit say to come back when the next probe may be
// admitted should this one fail (a break after its admission), not when its lease
// (10s) ends; after a missed deadline not before a gap from now (a tenth of the break),
// after error answers not before HalfOpenRetryDelay.
func TestMissedHalfOpenRefusalNamesTheNextProbe(t *testing.T) {
	h := newHarness(t, missedPolicy())
	h.acquire().CompleteMissed(errMissedDeadline)
	h.acquire().CompleteMissed(errMissedDeadline)
	h.probeAfter(time.Second)
	for _, c := range []struct{ advance, want time.Duration }{
		{250 * time.Millisecond, 750 * time.Millisecond},
		{700 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
	} {
		h.clock.Advance(c.advance)
		if got, want := h.rejected().NotBefore, h.clock.Now().Add(c.want); !got.Equal(want) {
			t.Fatalf("half-open refusal says come back in %v, want %v", got.Sub(h.clock.Now()), c.want)
		}
	}
	p := missedPolicy()
	p.HalfOpenRetryDelay = 200 * time.Millisecond
	e := newHarness(t, p)
	e.acquire().Complete(breaker.Failure)
	e.acquire().Complete(breaker.Failure)
	e.probeAfter(time.Second)
	for _, c := range []struct{ advance, want time.Duration }{
		{250 * time.Millisecond, 750 * time.Millisecond},
		{700 * time.Millisecond, 200 * time.Millisecond},
	} {
		e.clock.Advance(c.advance)
		if got, want := e.rejected().NotBefore, e.clock.Now().Add(c.want); !got.Equal(want) {
			t.Fatalf("half-open refusal after error answers says come back in %v, want %v", got.Sub(e.clock.Now()), c.want)
		}
	}
}

func TestMissedDeadlineOfAStalePermitChangesNothing(t *testing.T) {
	h := newHarness(t, missedPolicy())
	old := h.acquire()
	h.acquire().Complete(breaker.Failure)
	h.acquire().Complete(breaker.Failure)
	h.wantOpenFor(time.Second)
	for i := range 2 { // the first completion, and a second
		if old.CompleteMissed(errMissedDeadline) {
			t.Fatalf("completion %d: CompleteMissed of a permit of an earlier generation returned true", i+1)
		}
		h.wantOpenFor(time.Second)
	}
	// A probe whose lease ran out is stale too: its miss does not reopen the circuit.
	p := h.probeAfter(time.Second)
	h.clock.Advance(10 * time.Second)
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
	h.wantOpenFor(time.Second)
	if got := h.reasons(); len(got) != 1 || got[0] != "closed>open:"+breaker.ReasonFailureWindow {
		t.Fatalf("transitions %v", got)
	}
}

// missedCompleter records what a backend's permit is completed with.
type missedCompleter struct {
	o   breaker.Outcome
	err error
}

func (c *missedCompleter) CompletePermit(_ backend.PermitInfo, o breaker.Outcome) bool {
	c.o = o
	return true
}

func (c *missedCompleter) CompletePermitWith(_ backend.PermitInfo, o breaker.Outcome, err error) bool {
	c.o, c.err = o, err
	return true
}

func TestMissedDeadlineOfABackendPermitIsAFailureWithItsError(t *testing.T) {
	c := &missedCompleter{}
	if !backend.NewPermit(c, backend.PermitInfo{Generation: 3}).CompleteMissed(errMissedDeadline) || c.o != breaker.Failure || c.err != errMissedDeadline {
		t.Fatalf("backend got %v, %v; want a Failure with the error", c.o, c.err)
	}
}

// With DefaultPolicy a hung broker's probes follow each other about 55ms apart once
// each has waited out its caller's deadline: never more than one in flight, and the
// broker's return is seen by the probe in flight.
func TestDefaultPolicyProbesAHungBrokerOneCallAtATime(t *testing.T) {
	h := newHarness(t, breaker.DefaultPolicy(), breaker.WithRandom(func() float64 { return 0.5 }))
	for range 5 {
		h.acquire().CompleteMissed(context.DeadlineExceeded)
	}
	h.wantOpenFor(550 * time.Millisecond)
	p := h.probeAfter(550 * time.Millisecond)
	for range 5 {
		h.clock.Advance(time.Second) // the caller's deadline
		p.CompleteMissed(context.DeadlineExceeded)
		h.wantOpenFor(55 * time.Millisecond)
		p = h.probeAfter(55 * time.Millisecond)
	}
	h.clock.Advance(200 * time.Millisecond)
	p.Complete(breaker.Success)
	h.wantState(breaker.Closed)
}
