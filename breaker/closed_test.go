package breaker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Rule 1: a zero threshold disables the circuit.
func TestDisabledCircuitNeverOpensAndCountsNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{})
	h.calls(breaker.Failure, 1000)
	h.wantState(breaker.Closed)
	h.wantFailures(0)
	if g := h.b.Snapshot().Generation; g != 1 {
		t.Fatalf("generation %d, want 1: nothing may transition", g)
	}
}

func TestDisabledCircuitStillBoundsInFlight(t *testing.T) {
	h := newHarness(t, breaker.Policy{MaxInFlight: 2})
	a, b := h.acquire(), h.acquire()
	if _, err := h.b.Acquire(context.Background()); err != breaker.ErrSaturated {
		t.Fatalf("third Acquire: %v, want ErrSaturated", err)
	}
	a.Complete(breaker.Failure)
	b.Complete(breaker.Failure)
	h.call(breaker.Failure)
	h.wantFailures(0)
}

// Rule 2: consecutive mode.
func TestConsecutiveFailuresOpenAtThreshold(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second})
	h.calls(breaker.Failure, 2)
	h.wantFailures(2)
	h.call(breaker.Success) // resets
	h.wantFailures(0)
	h.calls(breaker.Failure, 2)
	h.wantState(breaker.Closed)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	h.wantFailures(3) // frozen evidence
	if got := h.reasons(); !slices.Equal(got, []string{"closed>open:failure_threshold"}) {
		t.Fatalf("transitions %v", got)
	}
}

// Rule 2: window mode counts failures in a trailing window of additive buckets.
func TestWindowCountsFailuresInTrailingWindow(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: 10 * time.Second})
	h.calls(breaker.Failure, 2)
	h.call(breaker.Success) // does not reset in window mode
	h.wantFailures(2)
	h.clock.Advance(11 * time.Second) // both failures leave the window
	h.wantFailures(0)
	h.call(breaker.Failure)
	h.clock.Advance(5 * time.Second)
	h.call(breaker.Failure)
	h.wantState(breaker.Closed)
	h.clock.Advance(4 * time.Second)
	h.call(breaker.Failure) // three inside 10s
	h.wantState(breaker.Open)
	if got := h.reasons(); !slices.Equal(got, []string{"closed>open:failure_window"}) {
		t.Fatalf("transitions %v", got)
	}
}

func TestWindowBucketsExpireOneAtATime(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 100, BreakDuration: time.Second, FailureWindow: 10 * time.Second})
	for range 10 { // one failure per one-second bucket
		h.call(breaker.Failure)
		h.clock.Advance(time.Second)
	}
	h.wantFailures(9) // the first bucket has just left the window
	for want := 8; want >= 0; want-- {
		h.clock.Advance(time.Second)
		h.wantFailures(want)
	}
}

func TestWindowMinimumCalls(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 5})
	h.calls(breaker.Failure, 4) // above the threshold, below MinimumCalls
	h.wantState(breaker.Closed)
	h.calls(breaker.Neutral, 10) // Neutral outcomes are not calls
	h.wantState(breaker.Closed)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
}

func TestWindowFailureRatio(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, FailureWindow: time.Minute, FailureRatio: 0.5})
	h.calls(breaker.Success, 6)
	h.calls(breaker.Failure, 5) // 5/11 < 0.5
	h.wantState(breaker.Closed)
	h.call(breaker.Failure) // 6/12 = 0.5
	h.wantState(breaker.Open)
	snap := h.b.Snapshot()
	if snap.Failures != 6 || snap.Calls != 12 {
		t.Fatalf("frozen evidence %d/%d, want 6/12", snap.Failures, snap.Calls)
	}
}

// Rule 3: Neutral changes nothing.
func TestNeutralChangesNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second})
	h.call(breaker.Failure)
	h.calls(breaker.Neutral, 10)
	h.call(breaker.Outcome(0)) // the zero Outcome is Neutral
	h.wantFailures(1)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
}

// Rule 5: double completion.
func TestSecondCompletionReturnsFalseAndChangesNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second})
	p := h.acquire()
	if !p.Complete(breaker.Failure) {
		t.Fatal("first Complete returned false")
	}
	copyOfP := p
	if p.Complete(breaker.Failure) || copyOfP.Complete(breaker.Failure) {
		t.Fatal("a second Complete returned true")
	}
	h.wantFailures(1)
	h.wantState(breaker.Closed)
	if (breaker.Permit{}).Complete(breaker.Failure) {
		t.Fatal("the zero Permit completed as live")
	}
}

// Rule 4 and 5: outcomes of calls admitted before the circuit opened are stale.
func TestLateOutcomeFromEarlierGenerationIsStale(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	early := h.acquire()
	earlier := h.acquire()
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	if early.Complete(breaker.Failure) {
		t.Fatal("stale Failure counted")
	}
	h.clock.Advance(time.Second)
	probe := h.acquire()
	if earlier.Complete(breaker.Success) {
		t.Fatal("stale Success counted")
	}
	h.wantState(breaker.HalfOpen)
	probe.Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if g := probe.Generation(); g != 3 {
		t.Fatalf("probe generation %d, want 3", g)
	}
}

func TestCanceledContextChangesNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.b.Acquire(ctx); err != context.Canceled {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	h.call(breaker.Success) // the in-flight slot was not taken
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	if _, err := h.b.Acquire(ctx); err != context.Canceled {
		t.Fatalf("Acquire on an open circuit with an ended context: %v, want context.Canceled", err)
	}
}

func TestClosedPathAllocatesNothing(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := h.b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Success)
	})
	if allocs != 0 {
		t.Fatalf("Acquire+Complete(Success) allocates %v times", allocs)
	}
}
