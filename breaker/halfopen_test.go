package breaker_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Rule 6: one probe; siblings are told to come back later.
func TestSingleProbeAndSaturatedNotBefore(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, ProbeLease: 5 * time.Second, HalfOpenRetryDelay: 2 * time.Second})
	h.open(1)
	h.clock.Advance(10 * time.Second)
	probe := h.acquire()
	if !probe.Probe() {
		t.Fatal("not a probe")
	}
	// The lease (5s) ends after the retry delay (2s): NotBefore is the lease expiry.
	if oe := h.rejected(); !oe.NotBefore.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("NotBefore %v, want the lease expiry", oe.NotBefore)
	}
	h.clock.Advance(4 * time.Second)
	// Now the retry delay ends later than the lease.
	if oe := h.rejected(); !oe.NotBefore.Equal(t0.Add(16 * time.Second)) {
		t.Fatalf("NotBefore %v, want now+HalfOpenRetryDelay", oe.NotBefore)
	}
	if s := h.b.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	probe.Complete(breaker.Success)
	h.wantState(breaker.Closed)
	want := []string{"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded"}
	if got := h.reasons(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestDefaultRetryDelayAndLease(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: 500 * time.Millisecond})
	h.open(1)
	h.clock.Advance(500 * time.Millisecond)
	h.acquire()
	// Default lease = BreakDuration (ends at +1s); default retry delay 1s (ends at +1.5s).
	if oe := h.rejected(); !oe.NotBefore.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("NotBefore %v", oe.NotBefore)
	}
}

// Rule 6: HalfOpenMaxProbes probes at once.
func TestHalfOpenMaxProbes(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, HalfOpenMaxProbes: 3, SuccessesToClose: 3})
	h.open(1)
	h.clock.Advance(time.Second)
	probes := []breaker.Permit{h.acquire(), h.acquire(), h.acquire()}
	h.rejected()
	for i, p := range probes {
		if !p.Probe() {
			t.Fatalf("permit %d is not a probe", i)
		}
	}
	probes[0].Complete(breaker.Success)
	h.wantState(breaker.HalfOpen)
	probes = append(probes, h.acquire()) // the freed slot is taken again
	h.rejected()
	probes[1].Complete(breaker.Success)
	probes[2].Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if probes[3].Complete(breaker.Failure) {
		t.Fatal("a probe of the closed generation counted")
	}
	h.wantState(breaker.Closed)
}

// Rule 7: SuccessesToClose.
func TestSuccessesToCloseAreConsecutive(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, SuccessesToClose: 2})
	h.open(1)
	h.clock.Advance(time.Second)
	h.call(breaker.Success)
	h.wantState(breaker.HalfOpen)
	h.call(breaker.Success)
	h.wantState(breaker.Closed)
	h.wantFailures(0)
}

// Rule 3: a Neutral probe frees its slot and the circuit stays half-open.
func TestNeutralProbeReleasesSlot(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	h.open(1)
	h.clock.Advance(time.Second)
	h.call(breaker.Neutral)
	h.wantState(breaker.HalfOpen)
	if p := h.acquire(); !p.Probe() {
		t.Fatal("the slot a Neutral probe left was not given to the next caller")
	}
}

// Rule 7: a failed probe reopens; breaks double up to MaxBreakDuration.
func TestFailedProbesDoubleTheBreakUpToMax(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 5 * time.Second})
	h.open(1)
	for i, want := range []time.Duration{2, 4, 5, 5} {
		h.clock.Set(h.rejected().NotBefore)
		now := h.clock.Now()
		h.call(breaker.Failure) // the probe fails
		oe := h.rejected()
		if got := oe.NotBefore.Sub(now); got != want*time.Second {
			t.Fatalf("failed probe %d: break %v, want %v", i+1, got, want*time.Second)
		}
	}
	// A success closes and resets the backoff.
	h.clock.Set(h.rejected().NotBefore)
	h.call(breaker.Success)
	h.open(1)
	if got := h.rejected().NotBefore.Sub(h.clock.Now()); got != time.Second {
		t.Fatalf("break after closing %v, want BreakDuration", got)
	}
}

func TestJitterSpreadsBreaks(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 800 * time.Millisecond}, {0.5, time.Second}, {0.999999, 1199999600 * time.Nanosecond}} {
		h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Jitter: 0.2},
			breaker.WithRandom(func() float64 { return tc.r }))
		h.open(1)
		if got := h.rejected().NotBefore.Sub(t0); got != tc.want {
			t.Errorf("random %v: break %v, want %v", tc.r, got, tc.want)
		}
	}
}

// Rule 8: a lost probe frees its slot after the lease; its late result is stale.
func TestProbeLeaseExpiry(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, ProbeLease: 3 * time.Second})
	h.open(1)
	h.clock.Advance(time.Second)
	lost := h.acquire()
	h.clock.Advance(3*time.Second - 1)
	h.rejected()
	h.clock.Advance(1)
	taker := h.acquire()
	if !taker.Probe() {
		t.Fatal("the expired lease was not taken over")
	}
	if lost.Complete(breaker.Failure) {
		t.Fatal("a probe whose lease expired counted")
	}
	h.wantState(breaker.HalfOpen)
	taker.Complete(breaker.Success)
	h.wantState(breaker.Closed)
}

func TestProbeCompletedAfterLeaseIsStaleEvenBeforeTakeover(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, ProbeLease: time.Second})
	h.open(1)
	h.clock.Advance(time.Second)
	p := h.acquire()
	h.clock.Advance(time.Second)
	if p.Complete(breaker.Success) {
		t.Fatal("a completion after the lease counted")
	}
	h.wantState(breaker.HalfOpen)
	if s := h.b.Snapshot(); s.Probes != 0 {
		t.Fatalf("%d probes in flight after the late completion", s.Probes)
	}
}

// Rule 9: MaxInFlight bounds every state; probes count; stale permits give slots back once.
func TestMaxInFlight(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 2, HalfOpenMaxProbes: 2})
	a, b := h.acquire(), h.acquire()
	if _, err := h.b.Acquire(context.Background()); err != breaker.ErrSaturated {
		t.Fatalf("Acquire over MaxInFlight: %v", err)
	}
	if s := h.b.Snapshot(); s.InFlight != 2 {
		t.Fatalf("InFlight %d", s.InFlight)
	}
	a.Complete(breaker.Failure) // opens; b is now stale
	h.rejected()                // precedence: open before saturated
	h.clock.Advance(time.Second)
	probe := h.acquire() // b still holds a slot: one left
	if !probe.Probe() {
		t.Fatal("not a probe")
	}
	if _, err := h.b.Acquire(context.Background()); err != breaker.ErrSaturated {
		t.Fatalf("second probe with one free slot left taken: %v, want ErrSaturated", err)
	}
	if b.Complete(breaker.Success) {
		t.Fatal("stale permit completed as live")
	}
	if b.Complete(breaker.Success) {
		t.Fatal("stale permit completed as live a second time")
	}
	if s := h.b.Snapshot(); s.InFlight != 1 || s.Probes != 1 {
		t.Fatalf("after the stale completion: InFlight %d Probes %d, want 1 and 1", s.InFlight, s.Probes)
	}
	second := h.acquire() // the slot b gave back
	probe.Complete(breaker.Success)
	second.Complete(breaker.Success)
	h.wantState(breaker.Closed)
	if s := h.b.Snapshot(); s.InFlight != 0 {
		t.Fatalf("InFlight %d at rest", s.InFlight)
	}
}

// Rule 9 under contention: callers turned away at MaxInFlight never show in the
// count, so a Snapshot taken at any moment reports at most MaxInFlight in flight.
func TestInFlightNeverOverMaxInFlight(t *testing.T) {
	h := newHarness(t, breaker.Policy{MaxInFlight: 1})
	held := h.acquire()
	defer held.Complete(breaker.Success)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if p, err := h.b.Acquire(context.Background()); err == nil {
					p.Complete(breaker.Success)
					t.Error("admitted over MaxInFlight")
				}
			}
		})
	}
	for range 20000 {
		if n := h.b.Snapshot().InFlight; n != 1 {
			t.Errorf("InFlight %d while one permit is held at MaxInFlight 1", n)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}

// heldOnlyBackend is a Completer for permits that are only held.
type heldOnlyBackend struct{}

func (heldOnlyBackend) CompletePermit(backend.PermitInfo, breaker.Outcome) bool { return true }

// A probe's completion is matched to its own lease, by its token and its sequence
// number together: two probes on fresh tokens share a sequence number, and the live
// one completing while the other's lease has run out still closes the circuit.
func TestProbeCompletionFindsItsOwnLease(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, HalfOpenMaxProbes: 2, ProbeLease: 10 * time.Second})
	h.open(1)
	// Empty the token pool, so that both probes get fresh tokens (sequence 0).
	held := make([]breaker.Permit, 0, 1<<15)
	for range cap(held) {
		held = append(held, backend.NewPermit(heldOnlyBackend{}, backend.PermitInfo{}))
	}
	h.clock.Advance(time.Second)
	first := h.acquire()
	h.clock.Advance(6 * time.Second)
	second := h.acquire()
	if !first.Probe() || !second.Probe() {
		t.Fatal("the calls after the break are not probes")
	}
	h.clock.Advance(5 * time.Second) // the first lease ran out, the second has 1s left
	if !second.Complete(breaker.Success) {
		t.Fatal("the live probe's success was not taken")
	}
	h.wantState(breaker.Closed)
	if first.Complete(breaker.Failure) {
		t.Fatal("the expired probe's outcome was taken")
	}
	for _, p := range held {
		p.Complete(breaker.Neutral)
	}
}

// A half-open circuit's snapshot counts only the probes whose lease still runs: a
// probe presumed lost at its lease's end is not in flight any more.
func TestSnapshotLeavesOutProbesPastTheirLease(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, ProbeLease: 10 * time.Second})
	h.call(breaker.Failure)
	h.clock.Advance(time.Minute)
	if p := h.acquire(); !p.Probe() {
		t.Fatal("the call after the break was not a probe")
	}
	if s := h.b.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("snapshot %+v, want one probe in flight", s)
	}
	h.clock.Advance(10 * time.Second)
	if s := h.b.Snapshot(); s.Probes != 0 {
		t.Fatalf("snapshot at the lease's end counts %d probes, want 0", s.Probes)
	}
}

// A circuit that recovered starts with an empty window: the failures that opened it
// do not count again.
func TestRecoveryEmptiesTheWindow(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 4, BreakDuration: time.Second,
		FailureWindow: 10 * time.Second, MinimumCalls: 4, FailureRatio: 0.5})
	h.calls(breaker.Failure, 4)
	if s := h.b.Snapshot(); s.State != breaker.Open {
		t.Fatalf("state %v after 4 failures of 4", s.State)
	}
	h.clock.Advance(time.Second)
	h.call(breaker.Success) // the probe closes the circuit
	h.call(breaker.Failure)
	if s := h.b.Snapshot(); s.State != breaker.Closed {
		t.Fatalf("state %v after one failure since the recovery; want closed", s.State)
	}
}
