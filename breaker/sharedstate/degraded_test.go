package sharedstate_test

// What a replica does when the store refuses writes or cannot be read (degraded.go):
// FailClosed, RetryDelay after a failed write, what counts as a refusal, the time
// edges of the degraded state, and what Snapshot shows meanwhile.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

func newFaultCircuit(t *testing.T, store sharedstate.Driver, clock *fakeclock.Clock, mode sharedstate.StoreFailure) *sharedstate.Circuit {
	t.Helper()
	c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
		Policy: breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: 10 * time.Second},
		Driver: store, Clock: clock, MaxStaleness: time.Second, RetryDelay: time.Second, OnStoreFailure: mode})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Under FailClosed a refused write refuses every call for RetryDelay, with
// ErrUnavailable, even on a fresh closed snapshot; the refused failure is not kept.
// After RetryDelay the store is tried again.
func TestFailClosedRefusesCallsAfterARefusedWrite(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	c := newFaultCircuit(t, store, clock, sharedstate.FailClosed)
	ctx := context.Background()
	p, err := c.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.RefuseWrites(errOOM)
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure the store refused counted under FailClosed")
	}
	if _, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrUnavailable) || !errors.Is(err, errOOM) {
		t.Fatalf("Acquire after a refused write under FailClosed: %v; want ErrUnavailable caused by the refusal", err)
	}
	if s := c.Snapshot(); s.DegradedSince.IsZero() || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want degraded with no failures kept", s)
	}
	store.RefuseWrites(nil)
	clock.Advance(time.Second)
	p, err = c.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after RetryDelay with writes taken again: %v", err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("a failure the store took did not count")
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() || s.Failures != 1 {
		t.Fatalf("snapshot %+v; want 1 failure, not degraded", s)
	}
}

// A store restored from an older copy (an earlier generation) is repaired by a
// replica that knew the circuit open; a tombstone (a record removed on purpose) is
// not: the circuit starts afresh.
func TestOlderRecordIsRepairedAndTombstoneIsNot(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	c := newFaultCircuit(t, store, clock, sharedstate.KeepLocal)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	backup, _ := store.Load(ctx, "kafka:orders")
	for range 3 {
		p, err := c.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	until := c.Snapshot().NotBefore
	store.Set("kafka:orders", backup) // closed, an earlier generation
	clock.Advance(time.Second)
	if _, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Acquire over a restored older record: %v; want the open circuit kept", err)
	}
	if r, _ := store.Load(ctx, "kafka:orders"); r.State != breaker.Open || r.OpenUntil != until.UnixNano() || r.Generation <= backup.Generation {
		t.Fatalf("stored %+v; want the open state written back, deadline %v, past generation %d", r, until, backup.Generation)
	}
	cur, _ := store.Load(ctx, "kafka:orders")
	store.Set("kafka:orders", sharedstate.Tombstone(cur.Version, clock.Now().UnixNano()))
	clock.Advance(time.Second)
	p, err := c.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after a tombstone: %v; want a fresh closed circuit", err)
	}
	p.Complete(breaker.Success)
	if r, _ := store.Load(ctx, "kafka:orders"); r.State != breaker.Closed || r.Reason != sharedstate.ReasonCleared || r.Generation <= cur.Generation {
		t.Fatalf("stored %+v after a tombstone; want a new closed generation", r)
	}
}

// What Snapshot shows when a degraded replica's local evidence and the shared record
// disagree: a shared break still running says more than a shorter local one; a local
// break or probe says more than a shared break that is over.

// locallyOpenCircuit returns a KeepLocal circuit that opened here (three refused failures,
// a one-minute break) at the clock's time.
func locallyOpenCircuit(t *testing.T, clock *fakeclock.Clock) (*sharedstate.Circuit, *counting) {
	t.Helper()
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	return c, d
}

// storeSharedOpen stores the record open until the given time, as another replica that
// could write would, and makes c read it.
func storeSharedOpen(t *testing.T, c *sharedstate.Circuit, d *counting, until time.Time, failures int64) {
	t.Helper()
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, until.UnixNano(), failures
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDegradedSnapshotShowsWhicheverBreakSaysMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shared   time.Duration // the shared break's end, from the local opening
		advance  time.Duration // then the clock moves on by this
		failures int64         // the shared record's count
		want     time.Duration // the NotBefore shown, from the local opening
		wantFail int
	}{
		{"a longer shared break", 5 * time.Minute, 0, 7, 5 * time.Minute, 7},
		{"a shorter shared break", 30 * time.Second, 0, 1, time.Minute, 3},
		{"a shared break that is over", 10 * time.Second, 20 * time.Second, 0, time.Minute, 3},
		{"a shared break ending now, the local one over", 2 * time.Minute, 2 * time.Minute, 0, time.Minute, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			c, d := locallyOpenCircuit(t, clock)
			opened := clock.Now()
			clock.Advance(tc.advance)
			storeSharedOpen(t, c, d, opened.Add(tc.shared), tc.failures)
			s := c.Snapshot()
			if s.State != breaker.Open || !s.NotBefore.Equal(opened.Add(tc.want)) || s.Failures != tc.wantFail {
				t.Fatalf("snapshot %v open until %v with %d failures; want open until %v with %d",
					s.State, s.NotBefore, s.Failures, opened.Add(tc.want), tc.wantFail)
			}
		})
	}
}

// A local probe shows as half-open, unless a shared break is still running.
func TestDegradedSnapshotShowsTheLocalProbeUnlessSharedIsOpen(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c, d := locallyOpenCircuit(t, clock)
	clock.Advance(time.Minute)
	p := mustAcquire(t, c)
	if !p.Probe() {
		t.Fatal("no local probe after the local break")
	}
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 || !s.NotBefore.IsZero() {
		t.Fatalf("with a local probe out: %v, %d probes, not before %v; want half-open, 1, none", s.State, s.Probes, s.NotBefore)
	}
	until := clock.Now().Add(time.Minute)
	storeSharedOpen(t, c, d, until, 3)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) {
		t.Fatalf("a local probe under a running shared break: %v until %v; want open until %v", s.State, s.NotBefore, until)
	}
	clock.Set(until)
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("a local probe once the shared break is over: %v with %d probes; want half-open with 1", s.State, s.Probes)
	}
	p.Complete(breaker.Neutral)
}

// A replica open on its own evidence (degraded.go: acquireDegraded) rejects without
// I/O for its whole local break, however old its snapshot of the shared record.

// Opened locally (three refused failures, a one-minute break), with a snapshot far
// past three quarters of MaxStaleness: calls are rejected until the local break ends,
// and the record is not read for them.
func TestLocallyOpenRejectsWithoutReadingAnOldSnapshot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Second })
	refusedFailure(t, c, d) // reads the record, then the store refuses the failure
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure) // the third opens here
	opened := clock.Now()
	for _, after := range []time.Duration{10 * time.Second, 59 * time.Second} {
		clock.Set(opened.Add(after))
		loads := d.count("load")
		if nb := openedUntil(t, c, "locally open"); !nb.Equal(opened.Add(time.Minute)) {
			t.Fatalf("%v into the local break: rejected until %v; want the local break's end %v", after, nb, opened.Add(time.Minute))
		}
		if n := d.count("load") - loads; n != 0 {
			t.Fatalf("%v into the local break, snapshot as old: %d reads for a rejected call; want none", after, n)
		}
	}
}

// Time edges of the degraded state: the end of a shared break while writes
// are refused, the end of RetryDelay for spent evidence, and an open shared record
// under FailClosed.

// At the very end of another replica's break, with refused evidence of its own and
// RetryDelay still running, a replica admits on local evidence (the HALF-OPEN write
// waits for the store), not as a probe; a nanosecond before, the shared break rejects.
func TestAtTheEndOfASharedBreakRefusedEvidenceAdmitsLocally(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	refusedFailure(t, c, d)
	end := clock.Now().Add(10 * time.Second)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, end.UnixNano()
	})
	clock.Set(end.Add(-time.Nanosecond))
	if got := openedUntil(t, c, "a nanosecond before the shared break ends"); !got.Equal(end) {
		t.Fatalf("rejected until %v; want the shared deadline %v", got, end)
	}
	clock.Set(end)
	p := mustAcquire(t, c)
	if p.Probe() {
		t.Fatal("at the end of the shared break: a probe; want a call admitted on local evidence")
	}
	p.Complete(breaker.Neutral)
}

// Evidence that is spent (a success after the refused failure) is dropped exactly
// when RetryDelay after the refusal ends.
func TestSpentEvidenceIsDroppedWhenRetryDelayEnds(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	refusedAt := clock.Now()
	refusedFailure(t, c, d)
	outcome(t, c, breaker.Success)
	clock.Set(refusedAt.Add(time.Second - time.Nanosecond))
	mustAcquire(t, c).Complete(breaker.Neutral)
	if s := c.Snapshot(); s.DegradedSince.IsZero() {
		t.Fatal("degraded state dropped before RetryDelay ended")
	}
	clock.Set(refusedAt.Add(time.Second))
	mustAcquire(t, c).Complete(breaker.Neutral)
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v when RetryDelay ended; want no longer degraded", s)
	}
}

// Under FailClosed a shared record known open still rejects as open, with its
// deadline, during the RetryDelay of a refused write: the refusal's ErrUnavailable is
// for calls the record would admit.
func TestFailClosedKnownOpenRecordRejectsAsOpen(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.OnStoreFailure = sharedstate.FailClosed
		cfg.RetryDelay = time.Minute
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := mustAcquire(t, c)
	d.RefuseWrites(errOOM)
	p.Complete(breaker.Failure) // refused: calls are refused for RetryDelay
	until := clock.Now().Add(10 * time.Minute)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, until.UnixNano(), 3
	})
	c.Forget() // read the record now
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the snapshot is stale, RetryDelay runs
	_, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !oe.NotBefore.Equal(until) {
		t.Fatalf("Acquire under FailClosed with the record known open: %v; want open until %v", err, until)
	}
}

// What a degraded replica does around the read of the shared record it makes when
// its snapshot is old.

// A local opening made while the degraded path reads the record (another caller's
// failure completing meanwhile; a driver hook runs it inside the read) refuses the
// call, as if it had been made before.
func TestLocalOpeningDuringTheDegradedReadRefusesTheCall(t *testing.T) {
	clock, d, c := refusingStoreCircuit(t, &transitions{}, nil)
	outcome(t, c, breaker.Failure) // 2 of 3 kept here
	third := mustAcquire(t, c)
	clock.Advance(time.Second) // the snapshot is old enough to be read again
	var until time.Time
	d.mu.Lock()
	d.onLoad = func() {
		d.mu.Lock()
		d.onLoad = nil
		d.mu.Unlock()
		third.Complete(breaker.Failure) // the third failure: open here
		until = clock.Now().Add(time.Minute)
	}
	d.mu.Unlock()
	p, err := c.Acquire(context.Background())
	wantRejectedUntil(t, p, err, until, "Acquire whose read saw a local opening")
}

// While this replica's local probe is out, the other calls are refused without a
// request to the store as long as the snapshot is fresh (younger than three quarters
// of MaxStaleness), and read the record first from then on.
func TestDuringTheLocalProbeAFreshSnapshotIsNotRead(t *testing.T) {
	clock, d, c := refusingStoreCircuit(t, &transitions{}, nil)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure) // the third failure: open here for a minute
	clock.Advance(time.Minute)
	probe := mustAcquire(t, c) // reads the record (the snapshot is old), then probes here
	defer probe.Complete(breaker.Neutral)
	if !probe.Probe() {
		t.Fatal("the call after the local break is no probe")
	}
	loads := d.count("load")
	if got, want := openedUntil(t, c, "during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("during the local probe rejected until %v; want %v", got, want)
	}
	if n := d.count("load") - loads; n != 0 {
		t.Fatalf("refusing a call during the local probe read the store %d times on a fresh snapshot", n)
	}
	clock.Advance(750 * time.Millisecond) // three quarters of MaxStaleness: the snapshot is old
	openedUntil(t, c, "during the local probe, on an old snapshot")
	if n := d.count("load") - loads; n != 1 {
		t.Fatalf("refusing a call during the local probe read the store %d times on a snapshot 750 ms old; want 1", n)
	}
}

// The degraded path decides on the record it has just read: a store that stops
// answering right after that read does not fail the call.
func TestDegradedCallDecidesOnTheRecordJustRead(t *testing.T) {
	clock, d, c := refusingStoreCircuit(t, &transitions{}, nil)
	clock.Advance(2 * time.Second) // the snapshot is past MaxStaleness
	loads := 0
	d.mu.Lock()
	d.onLoad = func() {
		if loads++; loads == 2 {
			d.Down(errOOM) // the store stops answering after the first read
		}
	}
	d.mu.Unlock()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire right after a successful read of a closed record: %v; want admitted", err)
	}
	p.Complete(breaker.Neutral)
	if loads == 0 {
		t.Fatal("the degraded call did not read the old snapshot's record")
	}
}

// A snapshot ahead of the clock (the clock stepped back behind it) has no age: the
// degraded path reads the record before deciding, so a break another replica wrote
// meanwhile, not this replica's local probe, turns the call away. (Within the first
// 750 ms of the circuit, so that no sum of the two clock readings passes for an age.)
func TestDegradedReplicaReadsWhenTheClockStepsBehindItsSnapshot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := keepLocalCircuit(t, d, clock, &transitions{}, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // opened by another replica; its break is over
		r.State, r.Generation, r.Reason = breaker.Open, r.Generation+1, breaker.ReasonFailureThreshold
		r.OpenUntil, r.Since = clock.Now().Add(-time.Second).UnixNano(), clock.Now().Add(-time.Minute).UnixNano()
	})
	clock.Advance(500 * time.Millisecond)
	d.RefuseWrites(errOOM)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	probe := mustAcquire(t, c) // the lease refused: a local probe
	defer probe.Complete(breaker.Neutral)
	if !probe.Probe() {
		t.Fatal("the call after the break is no probe")
	}
	until := clock.Now().Add(time.Hour)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // opened again by another replica
		r.Generation, r.OpenUntil, r.Since = r.Generation+1, until.UnixNano(), clock.Now().UnixNano()
	})
	clock.Advance(-400 * time.Millisecond) // behind the snapshot
	p, err := c.Acquire(ctx)
	wantRejectedUntil(t, p, err, until, "Acquire with the clock behind the snapshot during a local probe")
}

// A degraded replica without a snapshot (dropped by Forget) whose read fails has
// nothing to decide on: the call fails with ErrUnavailable.
func TestDegradedReplicaWithoutASnapshotFailsWhenTheReadFails(t *testing.T) {
	_, d, c := refusingStoreCircuit(t, &transitions{}, nil)
	c.Forget()
	d.Down(errDown)
	p, err := c.Acquire(context.Background())
	if !errors.Is(err, errDown) || !errors.Is(err, breaker.ErrUnavailable) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("Acquire with no snapshot and the store down: %v; want ErrUnavailable for %v", err, errDown)
	}
}

// What counts as the store refusing a write: a caller that gives up while
// the write is out is no refusal, so the replica neither degrades nor probes locally.

// cancelOnWriteDriver cancels the caller's context from inside the next Replace once
// armed, and fails that write with the context's error.
type cancelOnWriteDriver struct {
	*counting
	cancel func()
}

func (w *cancelOnWriteDriver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
		return ctx.Err()
	}
	return w.counting.Replace(ctx, id, expect, next)
}

func TestCallerCancellingDuringALeaseWriteIsNoRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	w := &cancelOnWriteDriver{counting: newCounting()}
	c := ruleCircuit(t, w, clock, nil)
	openAt(t, c)
	clock.Advance(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.cancel = cancel
	p, err := c.Acquire(ctx)
	if err == nil {
		p.Complete(breaker.Neutral)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire whose caller cancelled during the lease write: %v; want context.Canceled", err)
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want not degraded: a cancelled caller is no refusal", s)
	}
}

// A circuit whose policy cannot open keeps no local evidence: a refused write does not
// make it degraded.
func TestCircuitThatCannotOpenDoesNotDegrade(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.FailureThreshold = 0 })
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	clock.Advance(time.Minute) // the hold ends; writing its end is refused
	if p, err := c.Acquire(context.Background()); err == nil {
		p.Complete(breaker.Failure)
	}
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want not degraded: the policy cannot open", s)
	}
}

// After a failed write the circuit leaves the store alone for RetryDelay (under both
// store-failure modes), then tries again.
func TestWritesWaitRetryDelay(t *testing.T) {
	for name, mode := range map[string]sharedstate.StoreFailure{"KeepLocal": sharedstate.KeepLocal, "FailClosed": sharedstate.FailClosed} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newCounting()
			c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnStoreFailure = mode; cfg.MaxStaleness = time.Minute })
			permits := make([]breaker.Permit, 3)
			for i := range permits {
				p, err := c.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				permits[i] = p
			}
			d.RefuseWrites(errOOM)
			permits[0].Complete(breaker.Failure)
			if d.count("add") != 1 {
				t.Fatalf("%d writes for the first failure; want 1", d.count("add"))
			}
			clock.Advance(900 * time.Millisecond)
			permits[1].Complete(breaker.Failure)
			if d.count("add") != 1 {
				t.Fatalf("%d writes within RetryDelay of a refused one; want still 1", d.count("add"))
			}
			clock.Advance(200 * time.Millisecond)
			permits[2].Complete(breaker.Failure)
			if d.count("add") != 2 {
				t.Fatalf("%d writes after RetryDelay; want 2", d.count("add"))
			}
		})
	}
}
