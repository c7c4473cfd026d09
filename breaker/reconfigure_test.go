package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

func consecutive(threshold int, brk time.Duration) breaker.Policy {
	return breaker.Policy{FailureThreshold: threshold, BreakDuration: brk}
}

// reconfigure applies p and fails the test on error.
func (h *harness) reconfigure(p breaker.Policy) breaker.Change {
	h.t.Helper()
	c, err := h.b.Reconfigure(p)
	if err != nil {
		h.t.Fatalf("Reconfigure: %v", err)
	}
	return c
}

func TestReconfigureKeepsOpenDeadline(t *testing.T) {
	h := newHarness(t, consecutive(1, 30*time.Second))
	h.open(1)
	h.clock.Advance(10 * time.Second)
	gen := h.b.Snapshot().Generation
	c := h.reconfigure(consecutive(3, time.Minute))
	// Fields are compared with defaults written out: ProbeLease follows BreakDuration.
	if len(c.Fields) < 3 || c.Fields[0] != (breaker.FieldChange{Field: "FailureThreshold", From: "1", To: "3"}) ||
		c.Fields[1].Field != "BreakDuration" || c.Fields[2].Field != "ProbeLease" {
		t.Fatalf("fields %+v, want FailureThreshold, BreakDuration, ProbeLease first", c.Fields)
	}
	if c.RestartsCounts || c.Closes || c.OpensOnNextFailure {
		t.Fatalf("change %+v: want no restart, no close, no opening", c)
	}
	h.wantState(breaker.Open)
	s := h.b.Snapshot()
	if s.Generation != gen {
		t.Fatalf("generation %d, want %d", s.Generation, gen)
	}
	want := h.clock.Now().Add(20 * time.Second)
	if oe := h.rejected(); !oe.NotBefore.Equal(want) || !s.NotBefore.Equal(want) {
		t.Fatalf("NotBefore %v (snapshot %v), want %v: 20s left", oe.NotBefore, s.NotBefore, want)
	}
	h.clock.Advance(20*time.Second - time.Nanosecond)
	h.rejected()
	h.clock.Advance(time.Nanosecond)
	if p := h.acquire(); !p.Probe() {
		t.Fatal("at the kept deadline the next caller is not a probe")
	}
}

// A closed circuit with evidence below the old threshold: the plan says whether the
// next failure opens under the new one, and the circuit does what it says.
func TestReconfigureThresholdOpensOnNextFailureAsPlanned(t *testing.T) {
	for _, tc := range []struct {
		name     string
		to       int
		wantOpen bool
	}{
		{"lowered below the evidence", 3, true},
		{"lowered to the next failure", 5, true},
		{"raised", 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, consecutive(5, time.Second))
			h.calls(breaker.Failure, 4)
			to := consecutive(tc.to, time.Second)
			plan, err := h.b.PlanPolicy(to)
			if err != nil {
				t.Fatal(err)
			}
			h.wantFailures(4) // planning changes nothing
			c := h.reconfigure(to)
			if plan.OpensOnNextFailure != tc.wantOpen || c.OpensOnNextFailure != plan.OpensOnNextFailure {
				t.Fatalf("plan %v, change %v, want %v", plan.OpensOnNextFailure, c.OpensOnNextFailure, tc.wantOpen)
			}
			h.wantState(breaker.Closed) // the change itself opens nothing
			h.wantFailures(4)
			h.call(breaker.Failure)
			if got := h.b.State() == breaker.Open; got != plan.OpensOnNextFailure {
				t.Fatalf("after the next failure open=%v, plan said %v", got, plan.OpensOnNextFailure)
			}
		})
	}
}

func TestReconfigureEvidenceShapeRestartsCounts(t *testing.T) {
	win := func(w time.Duration) breaker.Policy {
		return breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: w}
	}
	for _, tc := range []struct {
		name         string
		from, to     breaker.Policy
		wantRestart  bool
		wantFailures int
	}{
		{"window length", win(10 * time.Second), win(20 * time.Second), true, 0},
		{"consecutive to window", consecutive(3, time.Second), win(10 * time.Second), true, 0},
		{"window to consecutive", win(10 * time.Second), consecutive(3, time.Second), true, 0},
		{"threshold only, window", win(10 * time.Second), breaker.Policy{FailureThreshold: 4, BreakDuration: time.Second, FailureWindow: 10 * time.Second}, false, 2},
		{"break only, consecutive", consecutive(3, time.Second), consecutive(3, 2*time.Second), false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.from)
			h.calls(breaker.Failure, 2)
			c := h.reconfigure(tc.to)
			if c.RestartsCounts != tc.wantRestart {
				t.Fatalf("RestartsCounts %v, want %v", c.RestartsCounts, tc.wantRestart)
			}
			h.wantFailures(tc.wantFailures)
			h.wantState(breaker.Closed)
			// The evidence goes on counting in its new shape.
			h.calls(breaker.Failure, 3-tc.wantFailures-1)
			h.wantState(breaker.Closed)
			h.call(breaker.Failure)
			if tc.to.FailureThreshold == 3 {
				h.wantState(breaker.Open)
			}
		})
	}
}

func TestReconfigurePermitsCompleteIntoTheirGeneration(t *testing.T) {
	h := newHarness(t, consecutive(2, time.Second))
	before := []breaker.Permit{h.acquire(), h.acquire(), h.acquire()}
	gen := h.b.Snapshot().Generation
	h.reconfigure(breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, MaxInFlight: 10})
	if before[0].Generation() != gen || h.b.Snapshot().Generation != gen {
		t.Fatal("the change moved the generation")
	}
	if !before[0].Complete(breaker.Failure) {
		t.Fatal("a permit from before the change completed as stale")
	}
	h.wantFailures(1)
	if !before[1].Complete(breaker.Failure) {
		t.Fatal("a permit from before the change completed as stale")
	}
	h.wantState(breaker.Open) // the two failures counted in the generation that admitted them
	if before[2].Complete(breaker.Failure) {
		t.Fatal("a permit of the ended generation counted")
	}
	if s := h.b.Snapshot(); s.InFlight != 0 {
		t.Fatalf("InFlight %d: permits from before the bound took no slot and give none back", s.InFlight)
	}
}

func TestReconfigureKeepsProbes(t *testing.T) {
	h := newHarness(t, consecutive(1, time.Second))
	h.open(1)
	h.clock.Advance(time.Second)
	probe := h.acquire()
	h.reconfigure(breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, SuccessesToClose: 1, HalfOpenMaxProbes: 2})
	h.wantState(breaker.HalfOpen)
	if !probe.Complete(breaker.Success) {
		t.Fatal("a probe from before the change completed as stale")
	}
	h.wantState(breaker.Closed)
}

func TestReconfigureDisablingClosesOpenCircuit(t *testing.T) {
	h := newHarness(t, consecutive(1, time.Minute))
	h.open(1)
	gen := h.b.Snapshot().Generation
	plan, err := h.b.PlanPolicy(breaker.Policy{})
	if err != nil || !plan.Closes {
		t.Fatalf("plan %+v, %v: want Closes", plan, err)
	}
	c := h.reconfigure(breaker.Policy{})
	if !c.Closes {
		t.Fatal("change does not say it closes")
	}
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.Generation != gen+1 {
		t.Fatalf("generation %d, want %d", s.Generation, gen+1)
	}
	last := h.seen[len(h.seen)-1]
	if last.Reason != breaker.ReasonPolicyChanged || last.From != breaker.Open || last.To != breaker.Closed {
		t.Fatalf("last transition %+v", last)
	}
}

func TestReconfigureTellsObservers(t *testing.T) {
	h := newHarness(t, consecutive(3, time.Second))
	h.reconfigure(consecutive(4, time.Second))
	if len(h.seen) != 1 {
		t.Fatalf("transitions %+v, want one", h.seen)
	}
	if tr := h.seen[0]; tr.Reason != breaker.ReasonPolicyChanged || tr.From != tr.To || tr.Generation != 1 {
		t.Fatalf("transition %+v: want policy_changed keeping state and generation", tr)
	}
	h.reconfigure(consecutive(4, time.Second)) // no difference: nothing to tell
	if len(h.seen) != 1 {
		t.Fatalf("an empty change was reported: %+v", h.seen)
	}
}

func TestReconfigureRefusesBadPolicy(t *testing.T) {
	h := newHarness(t, consecutive(3, time.Second))
	for _, tc := range []struct {
		p     breaker.Policy
		field string
	}{
		{breaker.Policy{FailureThreshold: 3}, "BreakDuration"},
		{breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, Scope: breaker.SharedDependency}, "Scope"},
	} {
		_, err := h.b.Reconfigure(tc.p)
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) || pe.Field != tc.field {
			t.Fatalf("Reconfigure(%+v): %v, want a PolicyError on %s", tc.p, err, tc.field)
		}
	}
	if got := h.b.Policy().FailureThreshold; got != 3 {
		t.Fatalf("a refused change altered the policy: threshold %d", got)
	}
}

func TestReconfigureHotPathAfterChange(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 1})
	h.reconfigure(consecutive(3, time.Second))
	p1 := h.acquire()
	p2 := h.acquire() // MaxInFlight is gone: a second call is admitted
	p1.Complete(breaker.Success)
	p2.Complete(breaker.Success)
	allocs := testing.AllocsPerRun(100, func() { h.acquire().Complete(breaker.Success) })
	if allocs != 0 {
		t.Fatalf("%v allocations per closed call after a change", allocs)
	}
}

// Policy changes race with calls on every path (closed, window, in-flight bound, slow
// calls, open and half-open): under -race this proves that calls read one policy
// without the lock. Afterwards every in-flight slot is back and the circuit still
// follows its last policy.
func TestReconfigureConcurrentWithCalls(t *testing.T) {
	policies := []breaker.Policy{
		consecutive(3, time.Millisecond),
		{FailureThreshold: 3, BreakDuration: time.Millisecond, FailureWindow: time.Second, MinimumCalls: 2},
		{FailureThreshold: 2, BreakDuration: time.Millisecond, MaxInFlight: 4},
		{FailureThreshold: 4, BreakDuration: time.Millisecond, SlowCallDuration: time.Millisecond, HalfOpenMaxProbes: 2},
		{FailureThreshold: 3, BreakDuration: time.Millisecond, Mode: breaker.FailOpen},
	}
	b, err := breaker.New("race", policies[0])
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				p, err := b.Acquire(context.Background())
				if err != nil {
					continue
				}
				o := breaker.Success
				if (i+w)%3 == 0 {
					o = breaker.Failure
				}
				p.Complete(o)
			}
		}()
	}
	for i := range 2000 {
		if _, err := b.Reconfigure(policies[i%len(policies)]); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			_ = b.Snapshot()
		}
	}
	close(done)
	wg.Wait()
	if s := b.Snapshot(); s.InFlight != 0 {
		t.Fatalf("InFlight %d after every call completed", s.InFlight)
	}
	if _, err := b.Reconfigure(consecutive(2, time.Hour)); err != nil {
		t.Fatal(err)
	}
	b.ForceClose(time.Now().Add(time.Hour))
	b.ClearOverride()
	for range 2 {
		p, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %v after 2 failures under threshold 2", b.State())
	}
}
