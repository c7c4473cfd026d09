package breaker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Rule 4: an open circuit rejects with the open deadline and is never extended.
func TestOpenRejectsUntilDeadlineWithoutExtending(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
	h.open(1)
	deadline := t0.Add(10 * time.Second)
	for i := range 9 {
		oe := h.rejected()
		if !oe.NotBefore.Equal(deadline) {
			t.Fatalf("rejection %d: NotBefore %v, want %v", i, oe.NotBefore, deadline)
		}
		if oe.Identity != "test" || oe.Scope != breaker.LocalProcess {
			t.Fatalf("rejection names %q scope %v", oe.Identity, oe.Scope)
		}
		h.clock.Advance(time.Second)
	}
	h.clock.Advance(999 * time.Millisecond)
	h.rejected()
	h.clock.Advance(time.Millisecond) // exactly at the deadline
	if p := h.acquire(); !p.Probe() {
		t.Fatal("first call after the deadline is not a probe")
	}
	if snap := h.b.Snapshot(); snap.NotBefore != (time.Time{}) {
		t.Fatalf("half-open snapshot NotBefore %v, want zero", snap.NotBefore)
	}
}

func TestOpenRejectionReusesOneErrorPerGeneration(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	h.open(1)
	if a, b := h.rejected(), h.rejected(); a != b {
		t.Fatal("two rejections of one open generation allocated two errors")
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := h.b.Acquire(ctx); err == nil {
			t.Fatal("admitted")
		}
	})
	if allocs != 0 {
		t.Fatalf("open rejection allocates %v times", allocs)
	}
	if msg := h.rejected().Error(); msg != "breaker: circuit open: test (retry after 2026-01-02T03:04:06Z)" {
		t.Fatalf("message %q", msg)
	}
}

func TestOpenSnapshotShowsDeadline(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
	h.open(2)
	s := h.b.Snapshot()
	if s.State != breaker.Open || s.Generation != 2 || s.Failures != 2 || !s.NotBefore.Equal(t0.Add(time.Minute)) {
		t.Fatalf("snapshot %+v", s)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"closed>open:failure_threshold"}) {
		t.Fatalf("transitions %v", got)
	}
}
