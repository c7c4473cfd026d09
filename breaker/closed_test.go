package breaker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"errors"
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

// A Success resets the consecutive failures on every consecutive-mode circuit, not
// only on the plain one whose success takes the inline path: with MaxInFlight or slow
// calls on, failure, success, failure is still one failure.
func TestSuccessResetsTheRunOnEveryClosedCircuit(t *testing.T) {
	for name, p := range map[string]breaker.Policy{
		"MaxInFlight":      {MaxInFlight: 5},
		"SlowCallDuration": {SlowCallDuration: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			p.FailureThreshold, p.BreakDuration = 2, time.Minute
			h := newHarness(t, p)
			h.call(breaker.Failure)
			h.call(breaker.Success)
			h.wantFailures(0)
			h.call(breaker.Failure)
			h.wantState(breaker.Closed)
			h.wantFailures(1)
		})
	}
}

// Rare traffic to a dead broker: one call every 10 seconds, or every 10 minutes, for
// 120 calls. Every policy the docs show (README examples, docs/slowness.md, window
// policies whose MinimumCalls such traffic never reaches) opens within its
// FailureThreshold calls or is refused by Validate; window policies fall back to
// consecutive counting once the run of failures spans a window.
func TestRareTrafficToADeadBrokerOpens(t *testing.T) {
	policies := map[string]breaker.Policy{
		"README consecutive 5":          {FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2},
		"README override 2":             {FailureThreshold: 2, BreakDuration: time.Minute},
		"README 10s break":              {FailureThreshold: 5, BreakDuration: 10 * time.Second},
		"DefaultPolicy":                 breaker.DefaultPolicy(),
		"window 10s, min 20, ratio 0.5": {FailureThreshold: 5, BreakDuration: 10 * time.Second, FailureWindow: 10 * time.Second, MinimumCalls: 20, FailureRatio: 0.5, SlowCallDuration: 250 * time.Millisecond, RampDuration: 5 * time.Second},
		"window 60s, min 10":            {FailureThreshold: 5, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 10},
		"window 60s, min 10, ratio 0.5": {FailureThreshold: 3, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 10, FailureRatio: 0.5},
	}
	for name, p := range policies {
		for _, every := range []time.Duration{10 * time.Second, 10 * time.Minute} {
			t.Run(fmt.Sprintf("%s, every %v", name, every), func(t *testing.T) {
				if err := p.Validate(); err != nil {
					return // refused: the other way to pass
				}
				h := newHarness(t, p)
				calls := 0
				for range 120 {
					if pm, err := h.b.Acquire(t.Context()); err == nil {
						calls++
						pm.Complete(breaker.Failure)
					}
					if h.b.State() != breaker.Closed {
						break
					}
					h.clock.Advance(every)
				}
				if h.b.State() != breaker.Open || calls > p.FailureThreshold {
					t.Fatalf("after %d calls the circuit is %v; want open within %d", calls, h.b.State(), p.FailureThreshold)
				}
			})
		}
	}
}

// Busy traffic is still judged by the window: failures quicker than the window below
// MinimumCalls do not open it.
func TestRareTrafficFallbackLeavesBusyWindowsAlone(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 20})
	for range 19 {
		h.call(breaker.Failure)
		h.clock.Advance(time.Second)
	}
	h.wantState(breaker.Closed)
	h.clock.Advance(time.Minute)
	h.call(breaker.Failure) // the run began more than a window ago, and the window holds few calls
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonRareTraffic {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonRareTraffic)
	}
}

// In window mode a Success ends the run of consecutive failures that the rare-traffic
// rule counts: a failure, a success, and a failure more than a window later is a run
// of one, which opens nothing.
func TestSuccessEndsTheRareTrafficRun(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute,
		FailureWindow: 10 * time.Second, MinimumCalls: 5})
	h.call(breaker.Failure)
	h.clock.Advance(time.Second)
	h.call(breaker.Success)
	h.clock.Advance(10 * time.Second)
	h.call(breaker.Failure)
	h.wantState(breaker.Closed)
	// The same calls without the success between them are a run of two, the first
	// more than a window ago: the rule opens the circuit.
	h.clock.Advance(11 * time.Second)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	if r := h.seen[len(h.seen)-1].Reason; r != breaker.ReasonRareTraffic {
		t.Fatalf("opened for %q, want %q", r, breaker.ReasonRareTraffic)
	}
}

// A success gives its MaxInFlight slot back.
func TestSuccessGivesTheInFlightSlotBack(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 1})
	for range 3 {
		h.call(breaker.Success)
	}
	p := h.acquire()
	if _, err := h.b.Acquire(t.Context()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a second call beside one in flight: %v, want ErrSaturated", err)
	}
	p.Complete(breaker.Success)
	h.call(breaker.Success)
}

// In window mode successes are calls of the window: with them the window reaches
// MinimumCalls, and the failure ratio is taken over them.
func TestWindowSuccessesAreCalls(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, FailureWindow: time.Hour,
		MinimumCalls: 8, FailureRatio: 0.5})
	h.calls(breaker.Success, 4)
	h.calls(breaker.Failure, 3)
	h.wantState(breaker.Closed) // 7 calls
	h.call(breaker.Failure)     // 4 of 8
	h.wantState(breaker.Open)
	wantOpenedFor(h, breaker.ReasonFailureWindow)
}

// A circuit opened for rare traffic stays open for BreakDuration from the failure that
// opened it, then admits a probe.
func TestRareTrafficOpeningLastsOneBreak(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, FailureWindow: time.Minute, MinimumCalls: 20})
	h.call(breaker.Failure)
	h.clock.Advance(2 * time.Minute)
	opened := h.clock.Now()
	h.call(breaker.Failure)
	wantOpenedFor(h, breaker.ReasonRareTraffic)
	if oe := h.rejected(); !oe.NotBefore.Equal(opened.Add(10 * time.Second)) {
		t.Fatalf("NotBefore %v, want %v", oe.NotBefore, opened.Add(10*time.Second))
	}
	h.clock.Advance(10*time.Second - 1)
	h.rejected()
	h.clock.Advance(1)
	if !h.acquire().Probe() {
		t.Fatal("the call after the break is not a probe")
	}
}
