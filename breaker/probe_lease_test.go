package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// brkNoBackend is a Completer for permits that are only held.
type brkNoBackend struct{}

func (brkNoBackend) CompletePermit(backend.PermitInfo, breaker.Outcome) bool { return true }

// A probe's completion is matched to its own lease, by its token and its sequence
// number together: two probes on fresh tokens share a sequence number, and the live
// one completing while the other's lease has run out still closes the circuit.
func TestProbeCompletionFindsItsOwnLease(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, HalfOpenMaxProbes: 2, ProbeLease: 10 * time.Second})
	h.open(1)
	// Empty the token pool, so that both probes get fresh tokens (sequence 0).
	held := make([]breaker.Permit, 0, 1<<15)
	for range cap(held) {
		held = append(held, backend.NewPermit(brkNoBackend{}, backend.PermitInfo{}))
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
