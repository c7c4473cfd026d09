package dynamo

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

func TestClosedAdmissionDoesNoIOWhileFresh(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	mustAcquire(t, c).Complete(breaker.Success)
	if got := f.st.count(); got != 2 {
		t.Fatalf("first Acquire made %d requests; want 2 (read the missing item, create it)", got)
	}
	base := f.st.count()
	for range 1000 {
		if !mustAcquire(t, c).Complete(breaker.Success) {
			t.Fatal("Complete(Success) on a closed circuit = false; want true")
		}
	}
	f.clk.Advance(749 * time.Millisecond)
	mustAcquire(t, c).Complete(breaker.Success)
	if got := f.st.count() - base; got != 0 {
		t.Fatalf("1001 healthy calls within 0.75 x staleness made %d requests; want 0", got)
	}
	f.clk.Advance(time.Millisecond) // three quarters stale: one caller reads the item
	for range 100 {
		mustAcquire(t, c).Complete(breaker.Success)
	}
	if got, loads := f.st.count()-base, f.st.count("load"); got != 1 || loads != 2 {
		t.Fatalf("calls after the snapshot aged made %d requests (%d loads in all); want exactly 1 refresh", got, loads)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Generation != gen0 || s.Scope != breaker.SharedDependency || s.Identity != testID {
		t.Fatalf("Snapshot = %+v; want closed generation %d of %q, shared", s, gen0, testID)
	}
}

func TestFailuresFromReplicasOpenTheSharedCircuit(t *testing.T) {
	f := newFleet(t, 3, sharedPolicy())
	for _, c := range f.r { // each replica reads the item once
		mustAcquire(t, c).Complete(breaker.Success)
	}
	for i, c := range f.r {
		fail(t, c, 1)
		if got := f.item().Failures; got != int64(i+1) {
			t.Fatalf("shared count after %d failures = %d", i+1, got)
		}
	}
	it := f.item()
	if it.State != breaker.Open || it.Generation != gen0+1 || it.Failures != 3 {
		t.Fatalf("item after three failures on three replicas = %+v; want open, generation %d, 3 failures", it, gen0+1)
	}
	deadline := time.Unix(0, it.OpenUntil)
	if want := t0.Add(10 * time.Second); !deadline.Equal(want) {
		t.Fatalf("open deadline = %v; want %v", deadline, want)
	}
	// The replica that wrote OPEN rejects at once; NotBefore is the shared deadline.
	if oe := mustReject(t, f.r[2]); !oe.NotBefore.Equal(deadline) {
		t.Fatalf("NotBefore = %v; want the open deadline %v", oe.NotBefore, deadline)
	}
	// The others learn it within MaxStaleness.
	f.clk.Advance(time.Second)
	for _, c := range f.r[:2] {
		if oe := mustReject(t, c); !oe.NotBefore.Equal(deadline) {
			t.Fatalf("NotBefore = %v; want the open deadline %v", oe.NotBefore, deadline)
		}
		if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(deadline) || s.Failures != 3 {
			t.Fatalf("Snapshot = %+v; want open until %v with 3 failures", s, deadline)
		}
	}
	// Rejections while open read nothing and never move the deadline.
	before := f.st.count()
	for range 100 {
		mustReject(t, f.r[0])
	}
	if got := f.st.count() - before; got != 0 {
		t.Fatalf("rejections by an open snapshot made %d requests; want 0", got)
	}
	if got := f.item(); got.OpenUntil != it.OpenUntil || got.Version != it.Version {
		t.Fatalf("rejections changed the item: %+v; was %+v", got, it)
	}
}

func TestSuccessResetsTheSharedCountOnlyWhenThereIsOne(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	a, b := f.r[0], f.r[1]
	mustAcquire(t, a).Complete(breaker.Success)
	mustAcquire(t, b).Complete(breaker.Success)
	writes := func() int { return f.st.count("put", "addFailure", "resetFailures") }
	base := writes()
	for range 100 {
		mustAcquire(t, a).Complete(breaker.Success)
	}
	if got := writes() - base; got != 0 {
		t.Fatalf("100 successes with no failures made %d writes; want 0", got)
	}
	fail(t, a, 2)
	if !mustAcquire(t, a).Complete(breaker.Success) {
		t.Fatal("Complete(Success) = false; want true")
	}
	if got, n := f.item().Failures, f.st.count("resetFailures"); got != 0 || n != 1 {
		t.Fatalf("after a success: shared count %d with %d resets; want 0 with 1", got, n)
	}
	mustAcquire(t, a).Complete(breaker.Success)
	if n := f.st.count("resetFailures"); n != 1 {
		t.Fatalf("a second success reset again (%d resets); want no write", n)
	}

	// A failure recorded by b is reset by a's success once a's snapshot shows it.
	fail(t, b, 1)
	mustAcquire(t, a).Complete(breaker.Success)
	if got := f.item().Failures; got != 1 {
		t.Fatalf("shared count = %d; want 1: a's fresh snapshot shows no failures, so it writes nothing", got)
	}
	f.clk.Advance(time.Second)
	mustAcquire(t, a).Complete(breaker.Success)
	if got := f.item().Failures; got != 0 {
		t.Fatalf("shared count after a refreshed = %d; want 0", got)
	}
}

func TestResetLostToAnotherReplicaStillCounts(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	a, b := f.r[0], f.r[1]
	fail(t, a, 1)
	f.clk.Advance(time.Second)
	mustAcquire(t, b).Complete(breaker.Success) // b refreshes (sees 1 failure) and resets
	if got := f.item().Failures; got != 0 {
		t.Fatalf("shared count = %d; want 0", got)
	}
	// a's snapshot still shows one failure: its reset finds nothing to reset.
	if !mustAcquire(t, a).Complete(breaker.Success) {
		t.Fatal("Complete(Success) = false after another replica reset first; want true")
	}
}

func TestTrippedItemIsOpenedByTheNextAcquire(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	// A replica reached the threshold and died before writing OPEN.
	it := sharedstate.Record{Version: 4, Fingerprint: testFingerprint(), State: breaker.Closed, Generation: 1, Failures: 3}
	f.st.raw(testID, encode(testID, it))
	oe := mustReject(t, f.r[0])
	got := f.item()
	if got.State != breaker.Open || got.Generation != 2 || !oe.NotBefore.Equal(time.Unix(0, got.OpenUntil)) {
		t.Fatalf("item = %+v, NotBefore %v; want open in generation 2 until NotBefore", got, oe.NotBefore)
	}
}

func TestLateOutcomesOfAnOlderGenerationChangeNothing(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	lateA, lateB := mustAcquire(t, f.r[0]), mustAcquire(t, f.r[1])
	f.open()
	before := f.item()
	if lateA.Complete(breaker.Failure) {
		t.Fatal("Complete(Failure) of a permit admitted before the circuit opened = true; want false")
	}
	// f.r[1]'s snapshot still shows the closed generation: the item's condition
	// refuses its write.
	if lateB.Complete(breaker.Failure) {
		t.Fatal("Complete(Failure) by a replica that has not seen the open = true; want false")
	}
	if got := f.item(); got.Version != before.Version {
		t.Fatalf("late outcomes changed the item: %+v; was %+v", got, before)
	}
}

func TestNeutralChangesNothing(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	fail(t, c, 2)
	before := f.item()
	for range 10 {
		if !mustAcquire(t, c).Complete(breaker.Neutral) {
			t.Fatal("Complete(Neutral) = false; want true")
		}
	}
	if got := f.item(); got.Version != before.Version || got.Failures != 2 {
		t.Fatalf("Neutral outcomes changed the item: %+v; was %+v", got, before)
	}
}

func TestDisabledPolicyCountsNothing(t *testing.T) {
	p := breaker.Policy{Scope: breaker.SharedDependency}
	f := newFleet(t, 1, p)
	c := f.r[0]
	for range 10 {
		if !mustAcquire(t, c).Complete(breaker.Failure) {
			t.Fatal("Complete(Failure) on a disabled circuit = false; want true")
		}
	}
	if got := f.item(); got.State != breaker.Closed || got.Failures != 0 || f.st.count("addFailure") != 0 {
		t.Fatalf("disabled circuit recorded failures: %+v", got)
	}
}

func TestMaxInFlightIsCountedPerProcess(t *testing.T) {
	p := sharedPolicy()
	p.MaxInFlight = 2
	f := newFleet(t, 2, p)
	a, b := f.r[0], f.r[1]
	p1, p2 := mustAcquire(t, a), mustAcquire(t, a)
	if _, err := a.Acquire(context.Background()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("third Acquire = %v; want ErrSaturated", err)
	}
	if s := a.Snapshot(); s.InFlight != 2 {
		t.Fatalf("Snapshot.InFlight = %d; want 2", s.InFlight)
	}
	mustAcquire(t, b).Complete(breaker.Success) // another process has its own bound
	p1.Complete(breaker.Success)
	p3 := mustAcquire(t, a)
	// While open, the open rejection comes before saturation.
	fail(t, b, 3)
	f.clk.Advance(time.Second)
	mustReject(t, a)
	// A stale permit still gives its slot back.
	if p2.Complete(breaker.Success) || p3.Complete(breaker.Success) {
		t.Fatal("Complete of a permit from before the open = true; want false")
	}
	if s := a.Snapshot(); s.InFlight != 0 {
		t.Fatalf("Snapshot.InFlight = %d after every permit completed; want 0", s.InFlight)
	}
}

func TestSlowSuccessCountsAsFailure(t *testing.T) {
	p := sharedPolicy()
	p.SlowCallDuration = 100 * time.Millisecond
	f := newFleet(t, 1, p)
	c := f.r[0]
	slow := mustAcquire(t, c)
	fast := mustAcquire(t, c)
	fast.Complete(breaker.Success)
	f.clk.Advance(200 * time.Millisecond)
	slow.Complete(breaker.Success)
	if got := f.item().Failures; got != 1 {
		t.Fatalf("shared count after a slow success = %d; want 1", got)
	}
}

func TestAcquireWithEndedContextChangesNothing(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.r[0].Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled) = %v; want context.Canceled", err)
	}
	if n := f.st.count(); n != 0 {
		t.Fatalf("Acquire(cancelled) made %d requests; want 0", n)
	}
}

func TestCompletingTwiceCountsOnce(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	p := mustAcquire(t, f.r[0])
	if !p.Complete(breaker.Failure) || p.Complete(breaker.Failure) {
		t.Fatal("Complete twice: want true then false")
	}
	if got := f.item().Failures; got != 1 {
		t.Fatalf("shared count = %d; want 1", got)
	}
}

func TestReadInFlightDoesNotUndoANewerWrite(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	fail(t, c, 2)
	last := mustAcquire(t, c)
	// The snapshot is three quarters stale, so the next Acquire refreshes it. While
	// that read is in flight, the third failure completes and this replica opens the
	// shared circuit: the read returns the item as it was before.
	f.clk.Advance(750 * time.Millisecond)
	f.st.afterRead = func() {
		if !last.Complete(breaker.Failure) {
			t.Error("Complete(Failure) = false; want true")
		}
	}
	if p, err := c.Acquire(context.Background()); err == nil {
		p.Complete(breaker.Neutral)
	}
	if it := f.item(); it.State != breaker.Open {
		t.Fatalf("stored state = %v; want open", it.State)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("Snapshot after a read older than this replica's own OPEN = %+v; want open", s)
	}
	mustReject(t, c)
}

func TestOpenRejectionAllocatesNothing(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	f.open()
	c, ctx := f.r[0], context.Background()
	var msg string
	allocs := testing.AllocsPerRun(100, func() {
		_, err := c.Acquire(ctx)
		msg = err.Error() // callers log it: one message per open generation
	})
	if allocs != 0 {
		t.Fatalf("a rejection by an open snapshot (and its message) allocated %v times; want 0", allocs)
	}
	if !strings.Contains(msg, testID) {
		t.Fatalf("rejection message %q does not name the circuit", msg)
	}
}

// The failure that reaches the threshold and the write of OPEN are two
// requests. A Success of another replica slipped in between must not reset the count
// (its reset is conditional on a count below the threshold), so the circuit opens.
func TestSuccessBetweenThresholdAndOpenCannotWipeTheThreshold(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	a, b := f.r[0], f.r[1]
	fail(t, a, 2)
	f.clk.Advance(time.Second) // b reads the item: two failures
	late := mustAcquire(t, b)
	if got := b.Snapshot().Failures; got != 2 {
		t.Fatalf("b sees %d failures; want 2", got)
	}
	f.st.afterUpdate = func() { late.Complete(breaker.Success) } // after a's ADD reached 3, before a writes OPEN
	mustAcquire(t, a).Complete(breaker.Failure)
	if it := f.item(); it.State != breaker.Open || it.Failures != 3 {
		t.Fatalf("item after F,F,F with an S slipped in before OPEN = %+v; want open with 3 failures", it)
	}
	f.clk.Advance(time.Second)
	mustReject(t, a)
	mustReject(t, b)
}

// One failure followed by 64 concurrent successes sends one reset, not
// one each (nor a read for each that lost).
func TestBurstOfSuccessesSendsOneReset(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	fail(t, c, 1)
	permits := make([]breaker.Permit, 64)
	for i := range permits {
		permits[i] = mustAcquire(t, c)
	}
	base := f.st.count()
	// The first reset to reach the table waits until every other completion has
	// returned, so that they all decide on the snapshot with one failure.
	var returned atomic.Int32
	first := true
	f.st.onRequest = func(method string) { // runs under the store's lock
		if method != "resetFailures" || !first {
			return
		}
		first = false
		f.st.mu.Unlock()
		defer f.st.mu.Lock()
		for deadline := time.Now().Add(10 * time.Second); returned.Load() < 63 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	var wg sync.WaitGroup
	for _, p := range permits {
		wg.Go(func() {
			if !p.Complete(breaker.Success) {
				t.Error("Complete(Success) = false; want true")
			}
			returned.Add(1)
		})
	}
	wg.Wait()
	if resets, all := f.st.count("resetFailures"), f.st.count()-base; resets != 1 || all != 1 {
		t.Fatalf("64 concurrent successes sent %d resets and %d requests in all; want 1 reset and nothing else", resets, all)
	}
	if it := f.item(); it.Failures != 0 {
		t.Fatalf("failures after the burst = %d; want 0", it.Failures)
	}
}
