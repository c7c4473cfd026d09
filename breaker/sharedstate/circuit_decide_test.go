package sharedstate_test

// The transitions a call writes (circuit.go: decide, takeLease, findLease, giveBack):
// opening a tripped record, ending a ForceClose, taking a probe lease, and what a
// lost conditional write or a lost answer leaves behind.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// The call after a tripped count opens the circuit for BreakDuration from now, in
// one write and no read, and is rejected by that opening.
func TestTrippedRecordIsOpenedByTheNextCall(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, nil)
	was := trippedRecord(t, d.counting, c)
	clock.Advance(100 * time.Millisecond)
	loads, writes := d.count("load"), d.count("replace")
	_, err := c.Acquire(context.Background())
	if want := clock.Now().Add(time.Minute); !openError(t, err).NotBefore.Equal(want) {
		t.Fatalf("rejected until %v; want %v", openError(t, err).NotBefore, want)
	}
	r := storedRecord(t, d.MemoryDriver)
	if r.State != breaker.Open || r.Generation != was.Generation+1 || r.OpenUntil != clock.Now().Add(time.Minute).UnixNano() ||
		r.Reason != breaker.ReasonFailureThreshold {
		t.Fatalf("stored %+v; want open for a minute from now, by the threshold, in the next generation", r)
	}
	if d.count("load") != loads || d.count("replace") != writes+1 {
		t.Fatalf("%d reads and %d writes; want one write", d.count("load")-loads, d.count("replace")-writes)
	}
}

// A ForceClose holds until exactly its deadline; the first call from then on writes
// the closed record that ends it (a new generation) and is admitted.
func TestForceCloseEndsAtItsDeadline(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, nil)
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	forced := storedRecord(t, d.MemoryDriver)
	clock.Advance(time.Minute - 1)
	if ok, err := acquireNeutral(c); !ok || storedRecord(t, d.MemoryDriver).Version != forced.Version {
		t.Fatalf("1ns before the deadline: admitted %v (%v), stored %+v; want admitted, nothing written", ok, err, storedRecord(t, d.MemoryDriver))
	}
	clock.Advance(1)
	loads := d.count("load")
	if ok, err := acquireNeutral(c); !ok || d.count("load") != loads {
		t.Fatalf("at the deadline, on a snapshot 1ns old: admitted %v (%v) after %d reads; want admitted, no read", ok, err, d.count("load")-loads)
	}
	r := storedRecord(t, d.MemoryDriver)
	if r.State != breaker.Closed || r.Override != breaker.NoOverride || r.Reason != breaker.ReasonOverrideExpired ||
		r.Generation != forced.Generation+1 {
		t.Fatalf("stored at the deadline %+v; want closed without override, expired, next generation", r)
	}
}

// A conditional write that lost to another replica is decided again on the record
// read afterwards, not on the snapshot that lost.
func TestLostWriteIsDecidedOnTheRecordReadAfterIt(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, nil)
	trippedRecord(t, d.counting, c)
	until := clock.Now().Add(5 * time.Minute)
	d.once(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // another replica opens it first
			r.State, r.Generation, r.OpenUntil, r.Reason, r.Since = breaker.Open, r.Generation+1, until.UnixNano(), breaker.ReasonForcedOpen, clock.Now().UnixNano()
			r.Override, r.OverrideUntil = breaker.ForcedOpen, until.UnixNano()
		})
		return d.counting.Replace(ctx, ordersID, expect, next)
	})
	_, err := c.Acquire(context.Background())
	if !errors.Is(err, breaker.ErrOpen) || !openError(t, err).NotBefore.Equal(until) {
		t.Fatalf("after losing the opening to another replica's: %v; want its rejection until %v", err, until)
	}
}

// A write the store refuses opens the circuit locally (KeepLocal) and tells OnError
// once.
func TestRefusedOpeningOpensLocallyAndReportsOnce(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	var reported []error
	c := freshCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnError = func(err error) { reported = append(reported, err) } })
	trippedRecord(t, d.counting, c)
	d.RefuseWrites(errOOM)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("tripped, opening refused: %v; want rejected by the local opening", err)
	}
	if len(reported) != 1 || !errors.Is(reported[0], errOOM) {
		t.Fatalf("OnError told %v; want the refusal once", reported)
	}
}

// Under FailClosed a refused opening fails the call with the store's error, and the
// call makes no further request (RetryDelay < 0: nothing holds a retry back).
func TestRefusedOpeningFailsClosedInOneRequest(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnStoreFailure = sharedstate.FailClosed; cfg.RetryDelay = -1 })
	trippedRecord(t, d.counting, c)
	d.RefuseWrites(errOOM)
	loads, writes := d.count("load"), d.count("replace")
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrUnavailable) || !errors.Is(err, errOOM) {
		t.Fatalf("tripped, opening refused, FailClosed: %v; want unavailable", err)
	}
	if d.count("load") != loads || d.count("replace") != writes+1 {
		t.Fatalf("%d reads and %d writes; want the one write", d.count("load")-loads, d.count("replace")-writes)
	}
}

// openedRecord opens c by failures and moves the clock to the end of the break, so the
// next call takes the half-open probe. It returns the open record.
func openedRecord(t *testing.T, d *hookedDriver, clock *fakeclock.Clock, c *sharedstate.Circuit) sharedstate.Record {
	t.Helper()
	tripCircuit(t, c)
	r := storedRecord(t, d.MemoryDriver)
	if r.State != breaker.Open {
		t.Fatalf("after 3 failures: %+v", r)
	}
	clock.Advance(time.Minute)
	return r
}

// When the answer to the probe lease's write is lost but the write took effect, the
// probe is the caller's: it is found by reading the record, and the observers learn
// of the half-open state before Acquire returns.
func TestLeaseWriteWithALostAnswerIsFoundAndUsed(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	var seen []breaker.Transition
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.OnStoreFailure = sharedstate.FailClosed
		cfg.Observers = []func(breaker.Transition){func(tr breaker.Transition) { seen = append(seen, tr) }}
	})
	open := openedRecord(t, d, clock, c)
	d.once(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		if err := d.counting.Replace(ctx, ordersID, expect, next); err != nil {
			return err
		}
		return errTimeout
	})
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("lease written, answer lost: %v; want the probe", err)
	}
	if n := len(seen); n == 0 || seen[n-1].To != breaker.HalfOpen || seen[n-1].Generation != open.Generation+1 {
		t.Fatalf("observers saw %v when Acquire returned; want the half-open generation last", seen)
	}
	if !p.Complete(breaker.Success) {
		t.Fatal("the probe's success did not count")
	}
	if r := storedRecord(t, d.MemoryDriver); r.State != breaker.Closed || r.Reason != breaker.ReasonProbeSucceeded {
		t.Fatalf("stored after the probe's success: %+v; want closed", r)
	}
}

// When the caller's context ends while the lease's write is out, a lease that was
// written is given back at once, so that another caller may probe without waiting
// ProbeLease.
func TestLeaseOfACallerGoneIsGivenBack(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, nil)
	openedRecord(t, d, clock, c)
	ctx, cancel := context.WithCancel(context.Background())
	d.once(func(wctx context.Context, expect uint64, next sharedstate.Record) error {
		if err := d.counting.Replace(wctx, ordersID, expect, next); err != nil {
			return err
		}
		cancel()
		return context.Canceled
	})
	if _, err := c.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("caller gone during the lease's write: %v; want its context's error", err)
	}
	if r := storedRecord(t, d.MemoryDriver); r.State != breaker.HalfOpen || len(r.Leases) != 0 {
		t.Fatalf("stored %+v; want half-open with the lease given back", r)
	}
	if _, err := acquireNeutral(ruleCircuit(t, d, clock, nil)); err != nil {
		t.Fatalf("another replica's call after the lease was given back: %v; want the probe", err)
	}
}

// When the lease's write times out and the record read afterwards does not hold it
// (another replica probes in the same generation), the probe is not the caller's: the
// write lost, and the call is decided on the record, even under FailClosed, since the
// store answered.
func TestLeaseNotFoundAfterALostAnswerIsNotTheCallers(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnStoreFailure = sharedstate.FailClosed; cfg.RetryDelay = -1 })
	openedRecord(t, d, clock, c)
	d.once(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		other := next
		other.Leases = []sharedstate.Lease{{ID: 2, Owner: "other", Expires: clock.Now().Add(time.Minute).UnixNano()}}
		if err := d.counting.Replace(ctx, ordersID, expect, other); err != nil {
			return err
		}
		return errTimeout
	})
	loads := d.count("load")
	_, err := c.Acquire(context.Background())
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("another replica's lease stored, answer lost: %v; want rejected by its probe", err)
	}
	if got := d.count("load") - loads; got != 3 {
		t.Fatalf("%d reads; want three: the stale snapshot's, the one that looked for the lease, and the retry's", got)
	}
}

// A recovery herd on a slow store: replicas that read the record as the break ended
// write their leases, and the answers are lost while the rest of the fleet takes the
// HalfOpenMaxProbes probes. The record read afterwards holds the fleet's leases, not
// theirs, so the store answers and decides: they are rejected, and neither degrade nor
// probe locally, so the fleet admits exactly HalfOpenMaxProbes probes.
func TestLostLeaseWritesOfAHerdAdmitNoExtraProbes(t *testing.T) {
	const maxProbes, lost = 3, 4
	clock := fakeclock.New(rulesT0)
	store := &circuittest.MemoryDriver{}
	fleet := make([]*sharedstate.Circuit, maxProbes+lost)
	drivers := make([]*duringWriteDriver, len(fleet)) // each replica's connection to store
	for i := range fleet {
		drivers[i] = &duringWriteDriver{counting: &counting{MemoryDriver: store, calls: map[string]int{}}, fail: errTimeout}
		fleet[i] = agedCircuit(t, drivers[i], clock, func(cfg *sharedstate.Config) { cfg.Policy.HalfOpenMaxProbes = maxProbes })
	}
	tripCircuit(t, fleet[0])
	clock.Advance(time.Minute) // the break is over; every snapshot is stale

	type answer struct {
		p   breaker.Permit
		err error
	}
	answers := make([]answer, len(fleet))
	acquire := func(i int) {
		p, err := fleet[i].Acquire(context.Background())
		answers[i] = answer{p, err}
	}
	// Replica maxProbes+k writes its lease while the next one reads and writes; the
	// last lost write is out while replicas 0..maxProbes-1 take their probes.
	for k := range lost {
		i := maxProbes + k
		drivers[i].during = func() {
			if k+1 < lost {
				acquire(i + 1)
				return
			}
			for j := range maxProbes {
				acquire(j)
			}
		}
	}
	acquire(maxProbes)

	probes := 0
	for i, a := range answers {
		switch {
		case a.err == nil && a.p.Probe():
			probes++
			defer a.p.Complete(breaker.Neutral)
		case a.err == nil:
			defer a.p.Complete(breaker.Neutral)
			t.Errorf("replica %d: admitted a call that is not a probe", i)
		case i >= maxProbes && !errors.Is(a.err, breaker.ErrOpen):
			t.Errorf("replica %d, its lease's answer lost: %v; want rejected by the fleet's probes", i, a.err)
		case i < maxProbes:
			t.Errorf("replica %d: %v; want a probe", i, a.err)
		}
		if s := fleet[i].Snapshot(); !s.DegradedSince.IsZero() {
			t.Errorf("replica %d degraded (%+v); the store answered the read after the lost write", i, s)
		}
	}
	if probes != maxProbes {
		t.Fatalf("the fleet admitted %d probes; want HalfOpenMaxProbes = %d", probes, maxProbes)
	}
	if r := storedRecord(t, store); r.State != breaker.HalfOpen || len(r.Leases) != maxProbes {
		t.Fatalf("stored %+v; want half-open with %d leases", r, maxProbes)
	}
}

// When the record cannot be read to look for the lease, the call fails with that
// read's error.
func TestLeaseSearchThatFailsIsTheError(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.OnStoreFailure = sharedstate.FailClosed })
	openedRecord(t, d, clock, c)
	d.once(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		d.Down(errDown)
		return errTimeout
	})
	if _, err := c.Acquire(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("lease's write timed out, store then down: %v; want the read's failure", err)
	}
}

// Under KeepLocal a store that times out every lease write lets this replica probe
// for itself, one probe at a time, and the failed shared attempt holds no slot.
func TestLeaseWritesTimingOutProbeLocally(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	openedRecord(t, d, clock, c)
	d.setHook(func(context.Context, uint64, sharedstate.Record) error { return errTimeout })
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("lease writes timing out, KeepLocal: %v; want a local probe", err)
	}
	if s := c.Snapshot(); s.InFlight != 1 {
		t.Fatalf("in flight with one probe: %d", s.InFlight)
	}
	p.Complete(breaker.Neutral)
}

// A lease write that lost to another replica's probe rejects the call on the record
// read afterwards, and frees the in-flight slot it had taken.
func TestLeaseLostToAnotherReplicaRejectsAndFreesTheSlot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	openedRecord(t, d, clock, c)
	expires := clock.Now().Add(30 * time.Second)
	d.once(func(ctx context.Context, expect uint64, next sharedstate.Record) error {
		editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
			r.State, r.Generation, r.OpenUntil, r.Reason = breaker.HalfOpen, r.Generation+1, 0, breaker.ReasonBreakElapsed
			r.Leases = []sharedstate.Lease{{ID: 2, Owner: "other", Expires: expires.UnixNano()}}
		})
		return d.counting.Replace(ctx, ordersID, expect, next)
	})
	_, err := c.Acquire(context.Background())
	if !errors.Is(err, breaker.ErrOpen) || !openError(t, err).NotBefore.Equal(expires) {
		t.Fatalf("probe taken by another replica first: %v; want rejected until its lease ends (%v)", err, expires)
	}
	if s := c.Snapshot(); s.InFlight != 0 {
		t.Fatalf("in flight after the rejection: %d; want 0", s.InFlight)
	}
}

// A half-open call over MaxInFlight is refused as saturated, not retried.
func TestProbeOverMaxInFlightIsSaturated(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.MaxInFlight = 1 })
	held, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { // another replica opened it; the break is over
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, clock.Now().UnixNano(), 3
	})
	clock.Advance(time.Second)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("probe with the one slot held: %v; want ErrSaturated", err)
	}
	held.Complete(breaker.Neutral)
}

// Within RetryDelay of a failed read, a call that would take the probe on a fresh
// open snapshot fails with that failure and writes nothing; from its end the call
// takes the probe.
func TestProbeWaitsOutRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, nil)
	tripCircuit(t, c)
	clock.Advance(time.Minute - 500*time.Millisecond)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Down(errDown)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	d.Down(nil)
	clock.Advance(600 * time.Millisecond) // the break is over; the snapshot is 600ms old
	writes := d.count("replace")
	if _, err := c.Acquire(context.Background()); !errors.Is(err, errDown) || d.count("replace") != writes {
		t.Fatalf("%v after %d writes; want the failed read's error and no write", err, d.count("replace")-writes)
	}
	clock.Advance(400 * time.Millisecond) // RetryDelay after the failed read
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("RetryDelay after a failed read, the break over: %v; want the probe", err)
	}
	p.Complete(breaker.Neutral)
}

// After a lease write the store refused (FailClosed), calls fail for exactly
// RetryDelay without writing, and the first call after it takes the probe on the
// snapshot still fresh (MaxStaleness 10 s).
func TestRefusedLeaseWriteWaitsExactlyRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.OnStoreFailure, cfg.MaxStaleness = sharedstate.FailClosed, 10*time.Second
	})
	openedRecord(t, d, clock, c)
	d.once(func(context.Context, uint64, sharedstate.Record) error { return errOOM })
	if _, err := c.Acquire(context.Background()); !errors.Is(err, errOOM) {
		t.Fatalf("lease write refused: %v", err)
	}
	writes := d.count("replace")
	clock.Advance(time.Second - 1)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, errOOM) || d.count("replace") != writes {
		t.Fatalf("1ns short of RetryDelay: %v after %d writes; want the refusal, no write", err, d.count("replace")-writes)
	}
	clock.Advance(1)
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("RetryDelay after the refused write: %v; want the probe", err)
	}
	p.Complete(breaker.Neutral)
}

// On a fresh open snapshot, the call at the open deadline takes the probe without
// reading the record first.
func TestProbeAtTheDeadlineOnAFreshSnapshotReadsNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := agedCircuit(t, d, clock, nil)
	tripCircuit(t, c)
	clock.Advance(time.Minute - 100*time.Millisecond)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(100 * time.Millisecond)
	loads := d.count("load")
	p, err := c.Acquire(context.Background())
	if err != nil || d.count("load") != loads {
		t.Fatalf("at the deadline: %v after %d reads; want the probe without a read", err, d.count("load")-loads)
	}
	p.Complete(breaker.Neutral)
}

// A half-open record's leases: one expiring now is taken over; live ones up to
// HalfOpenMaxProbes reject until the earliest expiry, or HalfOpenRetryDelay from
// now when that is later; a lease taken lasts ProbeLease.
func TestHalfOpenLeaseBoundaries(t *testing.T) {
	lease := func(id uint64, expires time.Time) sharedstate.Lease {
		return sharedstate.Lease{ID: id, Owner: "other", Expires: expires.UnixNano()}
	}
	for _, tc := range []struct {
		name      string
		probes    int
		leases    func(now time.Time) []sharedstate.Lease
		notBefore func(now time.Time) time.Time // zero: the probe is admitted
	}{
		{"a lease expiring now is taken over", 1,
			func(now time.Time) []sharedstate.Lease { return []sharedstate.Lease{lease(2, now)} }, nil},
		{"one live lease of two slots", 2,
			func(now time.Time) []sharedstate.Lease { return []sharedstate.Lease{lease(2, now.Add(time.Hour))} }, nil},
		{"a lease expiring in 1ns", 1,
			func(now time.Time) []sharedstate.Lease { return []sharedstate.Lease{lease(2, now.Add(1))} },
			func(now time.Time) time.Time { return now.Add(time.Second) }},
		{"two live leases, the earliest after the retry delay", 2,
			func(now time.Time) []sharedstate.Lease {
				return []sharedstate.Lease{lease(2, now.Add(10*time.Second)), lease(3, now.Add(5*time.Second))}
			},
			func(now time.Time) time.Time { return now.Add(5 * time.Second) }},
		{"two live leases, the first earliest", 2,
			func(now time.Time) []sharedstate.Lease {
				return []sharedstate.Lease{lease(2, now.Add(4*time.Second)), lease(3, now.Add(5*time.Second))}
			},
			func(now time.Time) time.Time { return now.Add(4 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := freshCircuit(t, d, clock, func(cfg *sharedstate.Config) {
				cfg.Policy.HalfOpenMaxProbes, cfg.Policy.ProbeLease = tc.probes, 20*time.Second
			})
			now := clock.Now()
			editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
				r.State, r.Generation, r.Reason, r.Leases = breaker.HalfOpen, r.Generation+1, breaker.ReasonBreakElapsed, tc.leases(now)
			})
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, err := c.Acquire(context.Background())
			if tc.notBefore != nil {
				if got := openError(t, err).NotBefore; !got.Equal(tc.notBefore(now)) {
					t.Fatalf("rejected until %v; want %v", got, tc.notBefore(now))
				}
				return
			}
			if err != nil {
				t.Fatalf("%v; want the probe", err)
			}
			r := storedRecord(t, d.MemoryDriver)
			mine := r.Leases[len(r.Leases)-1]
			if mine.Owner != c.Owner() || mine.Expires != now.Add(20*time.Second).UnixNano() {
				t.Fatalf("stored leases %+v; want this replica's last, for ProbeLease from now", r.Leases)
			}
		})
	}
}

// The end of a ForceClose needs a write. While RetryDelay holds writes back after a
// failed one, the next call that needs it gets that failure at once, even with a read
// in flight (held in the driver). The test runs in a synctest bubble: a call that
// waited for the read would wait until its own one-hour deadline, which the bubble
// reaches at once.
func TestBackoffDoesNotWaitForAReadInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
			cfg.Policy = breaker.Policy{Scope: breaker.SharedDependency, Disabled: true} // nothing kept locally
			cfg.MaxStaleness = time.Hour
			cfg.RetryDelay = time.Minute
		})
		ctx := context.Background()
		if err := c.ForceClose(ctx, clock.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute) // the ForceClose is over: the next call writes CLOSED
		entered, release := make(chan struct{}), make(chan struct{})
		d.mu.Lock()
		d.onLoad = func() {
			entered <- struct{}{}
			<-release
		}
		d.mu.Unlock()
		refreshed := make(chan error, 1)
		go func() { refreshed <- c.Refresh(ctx) }()
		<-entered // the read is in flight
		d.RefuseWrites(errOOM)
		if _, err := c.Acquire(ctx); !errors.Is(err, errOOM) {
			t.Fatalf("the write that ends the ForceClose refused: %v; want %v", err, errOOM)
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		p, err := c.Acquire(callCtx)
		if !errors.Is(err, errOOM) || !errors.Is(err, breaker.ErrUnavailable) {
			if err == nil {
				p.Complete(breaker.Neutral)
			}
			t.Errorf("the next call within RetryDelay: %v; want the failure waited out, %v", err, errOOM)
		}
		close(release)
		if err := <-refreshed; err != nil {
			t.Fatal(err)
		}
	})
}
