package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
