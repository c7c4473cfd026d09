package breaker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// bypassLog records what the bypass hook is told.
type bypassLog struct{ seen []breaker.Bypass }

func (l *bypassLog) hook(b breaker.Bypass) { l.seen = append(l.seen, b) }

func TestShadowAdmitsEverythingAndBehavesLikeEnforce(t *testing.T) {
	log := &bypassLog{}
	pol := breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, Mode: breaker.Shadow}
	h := newHarness(t, pol, breaker.WithBypassHook(log.hook))
	h.open(2)
	// Open: every call admitted, reported with the NotBefore Enforce would have given.
	for range 3 {
		p := h.acquire()
		if !p.Bypass() || p.Probe() {
			t.Fatalf("bypass %v probe %v", p.Bypass(), p.Probe())
		}
		if p.Complete(breaker.Success) {
			t.Fatal("an outcome Enforce would never have seen counted")
		}
	}
	h.wantState(breaker.Open)
	if len(log.seen) != 3 || !log.seen[0].NotBefore.Equal(t0.Add(10*time.Second)) || log.seen[0].Mode != breaker.Shadow ||
		log.seen[0].State != breaker.Open || !errors.Is(log.seen[0].Err, breaker.ErrOpen) {
		t.Fatalf("hook saw %+v", log.seen)
	}
	// Half-open: the probe is real; siblings are would-rejects.
	h.clock.Advance(10 * time.Second)
	probe := h.acquire()
	sibling := h.acquire()
	if !probe.Probe() || probe.Bypass() || !sibling.Bypass() {
		t.Fatalf("probe %v/%v sibling bypass %v", probe.Probe(), probe.Bypass(), sibling.Bypass())
	}
	if sibling.Complete(breaker.Success) {
		t.Fatal("a shadow sibling's outcome counted")
	}
	h.wantState(breaker.HalfOpen)
	probe.Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.Bypassed != 4 || s.Mode != breaker.Shadow {
		t.Fatalf("snapshot %+v", s)
	}
	if len(log.seen) != 4 {
		t.Fatalf("hook called %d times for 4 bypasses", len(log.seen))
	}
}

func TestShadowAdmitsOverMaxInFlight(t *testing.T) {
	log := &bypassLog{}
	h := newHarness(t, breaker.Policy{MaxInFlight: 1, Mode: breaker.Shadow}, breaker.WithBypassHook(log.hook))
	a := h.acquire()
	b := h.acquire()
	if a.Bypass() || !b.Bypass() || len(log.seen) != 1 || log.seen[0].Err != breaker.ErrSaturated {
		t.Fatalf("a %v b %v hook %+v", a.Bypass(), b.Bypass(), log.seen)
	}
	b.Complete(breaker.Success)
	a.Complete(breaker.Success)
	if s := h.b.Snapshot(); s.InFlight != 0 {
		t.Fatalf("in flight %d: the bypass took or gave back a slot it never had", s.InFlight)
	}
}

func TestFailOpenBypassesAndRecoversFromBypassedOutcomes(t *testing.T) {
	log := &bypassLog{}
	pol := breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, SuccessesToClose: 2, Mode: breaker.FailOpen}
	h := newHarness(t, pol, breaker.WithBypassHook(log.hook))
	h.open(1)
	during := h.acquire()
	if !during.Bypass() || during.Complete(breaker.Success) {
		t.Fatal("a bypass during the break counted or was not a bypass")
	}
	h.clock.Advance(10 * time.Second)
	probe := h.acquire() // held: never completes
	if !probe.Probe() || probe.Bypass() {
		t.Fatal("the first call after the break is not a real probe")
	}
	// Bypassed calls while half-open are evidence: two successes close the circuit.
	for i := range 2 {
		p := h.acquire()
		if !p.Bypass() || !p.Complete(breaker.Success) {
			t.Fatalf("bypass %d did not count toward recovery", i)
		}
	}
	h.wantState(breaker.Closed)
	if len(log.seen) != 3 || log.seen[2].State != breaker.HalfOpen || log.seen[2].Mode != breaker.FailOpen {
		t.Fatalf("audit hook saw %+v", log.seen)
	}
	if probe.Complete(breaker.Failure) {
		t.Fatal("the held probe of the old generation counted")
	}
	want := []string{"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded"}
	if got := h.reasons(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v", got)
	}
}

func TestFailOpenBypassedFailureReopens(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Mode: breaker.FailOpen})
	h.open(1)
	h.clock.Advance(time.Second)
	h.acquire() // the probe, held
	h.acquire().Complete(breaker.Failure)
	h.wantState(breaker.Open)
}

func TestFailOpenStillEnforcesMaxInFlight(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 1, Mode: breaker.FailOpen})
	held := h.acquire()
	if _, err := h.b.Acquire(context.Background()); err != breaker.ErrSaturated {
		t.Fatalf("over MaxInFlight under FailOpen: %v", err)
	}
	held.Complete(breaker.Neutral)
}

func TestEnforceNeverCallsTheBypassHook(t *testing.T) {
	log := &bypassLog{}
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, breaker.WithBypassHook(log.hook))
	h.open(1)
	h.rejected()
	if len(log.seen) != 0 || h.b.Snapshot().Bypassed != 0 {
		t.Fatal("Enforce reported a bypass")
	}
}
