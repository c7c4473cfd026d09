package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A windowed completion that finds the circuit moved to a new phase between
// complete's check and taking the lock counts nowhere: Complete reports false and the
// new phase's window stays empty.
func TestWindowedOutcomeAfterAPhaseChangeCountsNowhere(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b, err := New("test", Policy{FailureThreshold: 1, BreakDuration: time.Minute, FailureWindow: time.Minute}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := b.cur.Load()
	ran := 0
	testHookRecordWindow = func() {
		ran++
		// Another caller ends a hold in between: a fresh closed phase.
		b.ForceClose(clock.Now().Add(time.Hour))
		b.ClearOverride()
	}
	t.Cleanup(func() { testHookRecordWindow = nil })
	if p.Complete(Failure) {
		t.Error("Complete of a permit whose phase ended under it returned true")
	}
	testHookRecordWindow = nil
	if ran != 1 {
		t.Fatalf("the hook ran %d times, want 1", ran)
	}
	if b.cur.Load() == before {
		t.Fatal("the hook did not change the phase")
	}
	if s := b.Snapshot(); s.State != Closed || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want closed with no failure: the failure of the ended phase counted", s)
	}
}
