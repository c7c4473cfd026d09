package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Drop on a circuit without an adaptive limit completes the permit as Neutral: it is
// taken (true, once), gives its MaxInFlight slot back, and neither adds to nor clears
// the failure run.
func TestDropWithoutALimitIsNeutral(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 1})
	h.calls(breaker.Failure, 2)
	p := h.acquire()
	if _, err := h.b.Acquire(t.Context()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a second call beside one in flight: %v, want ErrSaturated", err)
	}
	if !p.Drop() || p.Drop() || p.Complete(breaker.Failure) {
		t.Fatal("Drop: want true once, then nothing")
	}
	h.wantFailures(2)
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
}
