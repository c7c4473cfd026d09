package sharedstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

const amnesiaID = "kafka:orders"

// openAt opens c (threshold 3) at the clock's time and returns its deadline.
func openAt(t *testing.T, c *sharedstate.Circuit) time.Time {
	t.Helper()
	for range 3 {
		p, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	s := c.Snapshot()
	if s.State != breaker.Open {
		t.Fatalf("state %v after 3 failures", s.State)
	}
	return s.NotBefore
}

// A store that forgot an open circuit, and in which another replica has since
// created a new closed record, is repaired by the replica that knew it open: the open
// state goes back with a generation past the new record's, so the permits taken
// under the new record no longer count.
func TestForgottenOpenCircuitIsWrittenBackOverANewRecord(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	a := ruleCircuit(t, d, clock, nil)
	clock.Advance(40 * time.Second) // the snapshot's age is not its creation time
	until := openAt(t, a)
	clock.Advance(30 * time.Second)
	d.Forget()
	b := ruleCircuit(t, d, clock, nil) // creates a new closed record
	pb, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatalf("the new replica over a forgotten record: %v", err)
	}
	created, err := d.Load(context.Background(), amnesiaID)
	if err != nil || created.State != breaker.Closed {
		t.Fatalf("new record %+v, %v", created, err)
	}
	if _, err := a.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("the replica that knew the circuit open: %v, want ErrOpen", err)
	}
	r, err := d.Load(context.Background(), amnesiaID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != breaker.Open || r.OpenUntil != until.UnixNano() || r.Generation <= created.Generation || r.Version <= created.Version {
		t.Fatalf("stored %+v; want open until %v, generation and version past the new record's %d, %d", r, until, created.Generation, created.Version)
	}
	if pb.Complete(breaker.Failure) {
		t.Error("a permit of the record the repair replaced counted")
	}
}

// A record another replica has already moved on (a transition of its own, here an
// open circuit of a later generation) is not overwritten.
func TestNewerRecordWithATransitionIsNotRepaired(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	a := ruleCircuit(t, d, clock, nil)
	openAt(t, a)
	clock.Advance(30 * time.Second)
	d.Forget()
	b := ruleCircuit(t, d, clock, nil)
	clock.Advance(time.Second)
	openAt(t, b) // a new generation with its own opening
	mine, _ := d.Load(context.Background(), amnesiaID)
	clock.Advance(2 * time.Second)
	a.Acquire(context.Background())
	if r, _ := d.Load(context.Background(), amnesiaID); r.Version != mine.Version {
		t.Fatalf("stored %+v; want the other replica's record (version %d) left alone", r, mine.Version)
	}
}

// A replica that has not read the circuit for longer than the longest break does not
// bring back an outage it saw: the store's new closed record stands.
func TestStaleSnapshotDoesNotRepair(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	a := ruleCircuit(t, d, clock, nil) // BreakDuration 1 min
	openAt(t, a)
	clock.Advance(10 * time.Minute)
	d.Forget()
	if _, err := a.Acquire(context.Background()); err != nil {
		t.Fatalf("after the store forgot an outage 10 min old: %v, want a fresh closed circuit", err)
	}
	if r, _ := d.Load(context.Background(), amnesiaID); r.State != breaker.Closed {
		t.Fatalf("stored %+v; want a new closed record", r)
	}
}

// memory is how long a snapshot may repair a store: the longest break plus a probe lease.
func memory(c *sharedstate.Circuit) time.Duration {
	p := c.Policy()
	return max(p.MaxBreakDuration, p.BreakDuration) + p.ProbeLease
}

// A snapshot repairs the store from the moment it was taken (age 0) up to and
// including the age memory; the record it writes has a version past the one it knew.
func TestSnapshotRepairsUpToItsMemory(t *testing.T) {
	for _, age := range []string{"zero", "memory", "memory, opened late"} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		a := ruleCircuit(t, d, clock, nil)
		if age == "memory, opened late" { // the age is not the time since the replica began
			clock.Advance(memory(a))
		}
		openAt(t, a)
		known, _ := d.Load(context.Background(), amnesiaID)
		if age != "zero" {
			clock.Advance(memory(a))
		}
		d.Forget()
		if err := a.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		r, err := d.Load(context.Background(), amnesiaID)
		if err != nil || r.State != breaker.Open || r.Generation != known.Generation || r.Version <= known.Version {
			t.Errorf("age %s: stored %+v, %v; want the open record (generation %d) back at a version past %d", age, r, err, known.Generation, known.Version)
		}
	}
}

// The edges of amnesia repair and tombstones.

// A closed record whose creation time is the very instant of the opening this replica
// knows is not known to be newer than it, and is not overwritten; one created a
// nanosecond later is.
func TestRecordCreatedAtTheOpeningInstantIsNotRepaired(t *testing.T) {
	for _, tc := range []struct {
		after    time.Duration
		repaired bool
	}{{0, false}, {time.Nanosecond, true}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		a := ruleCircuit(t, d, clock, nil)
		if err := a.Refresh(context.Background()); err != nil { // created now: the generation
			t.Fatal(err)
		}
		clock.Advance(40 * time.Second) // the opening's time is past the generation
		openAt(t, a)
		opened, err := d.Load(context.Background(), amnesiaID)
		if err != nil {
			t.Fatal(err)
		}
		created := uint64(clock.Now().Add(tc.after).UnixNano())
		d.Forget()
		d.Set(amnesiaID, sharedstate.Record{Version: created, Generation: created, State: breaker.Closed,
			Fingerprint: opened.Fingerprint, Policy: opened.Policy})
		clock.Advance(2 * time.Second)
		_, err = a.Acquire(context.Background())
		if got := errors.Is(err, breaker.ErrOpen); got != tc.repaired {
			t.Fatalf("record created %v after the opening: Acquire = %v; want the open state written back: %v", tc.after, err, tc.repaired)
		}
	}
}

// The closed record that replaces a tombstone is an ordinary record: reading it again
// writes nothing.
func TestRecordAfterATombstoneIsNotReplacedAgain(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	cur, _ := d.Load(ctx, amnesiaID)
	d.Set(amnesiaID, sharedstate.Tombstone(cur.Version, clock.Now().UnixNano()))
	clock.Advance(time.Second)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, _ := d.Load(ctx, amnesiaID)
	clock.Advance(time.Second)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := d.Load(ctx, amnesiaID); r.Version != fresh.Version || r.Generation != fresh.Generation {
		t.Fatalf("reading the fresh record again rewrote it: %+v, was %+v", r, fresh)
	}
}

// A tombstone's version moves past the record it replaces even when that version is
// ahead of the clock (versions start at a writer's clock, which may run ahead), and
// otherwise starts at the clock; it is checked like any record.
func TestTombstoneVersionMovesPastTheRecord(t *testing.T) {
	now := rulesT0.UnixNano()
	for _, tc := range []struct {
		prev uint64
		want uint64
	}{{uint64(now) + 50, uint64(now) + 51}, {uint64(now) - 50, uint64(now)}, {0, uint64(now)}} {
		r := sharedstate.Tombstone(tc.prev, now)
		if r.Version != tc.want || r.Generation != tc.want || r.Reason != sharedstate.ReasonCleared || r.State != breaker.Closed {
			t.Errorf("Tombstone(%d, %d) = %+v; want version and generation %d", tc.prev, now, r, tc.want)
		}
		if err := r.Check("kafka:orders"); err != nil {
			t.Errorf("Tombstone(%d, %d) fails Check: %v", tc.prev, now, err)
		}
	}
}

// Amnesia repair trusts the local snapshot only while its age is known: a clock that
// stepped back behind the snapshot gives it no age at all.

// A replica whose clock stepped back behind its open snapshot does not write that
// snapshot back over a store that forgot the record: it creates a closed record.
func TestSnapshotAheadOfASteppedBackClockIsNotWrittenBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		back     time.Duration // the clock steps back by this from the opening
		repaired bool
	}{
		{"the clock at the snapshot", 0, true},
		{"the clock behind the snapshot", 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newCounting()
			a := ruleCircuit(t, d, clock, nil)
			clock.Advance(40 * time.Second) // the snapshot is taken 40 s after a started
			openAt(t, a)
			d.Forget()
			clock.Advance(-tc.back)
			if err := a.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			r, err := d.Load(context.Background(), amnesiaID)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.State == breaker.Open; got != tc.repaired {
				t.Fatalf("record after the store forgot it, clock %v behind the opening: %v (%s); want the open snapshot written back: %v",
					tc.back, r.State, r.Reason, tc.repaired)
			}
		})
	}
}

// A closed record of the very generation of the opening this replica knows is not
// known to be created since (generations of new records start at the clock, so only a
// later one is); one a generation later is. The circuit here opens at the instant it
// was created, so that both generations are past the opening's time.
func TestRecordOfTheOpeningsGenerationIsNotRepaired(t *testing.T) {
	for _, tc := range []struct {
		later    uint64
		repaired bool
	}{{0, false}, {1, true}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		a := ruleCircuit(t, d, clock, nil)
		openAt(t, a) // created and opened at rulesT0: generation rulesT0+1
		opened, err := d.Load(context.Background(), amnesiaID)
		if err != nil {
			t.Fatal(err)
		}
		d.Forget()
		gen := opened.Generation + tc.later
		d.Set(amnesiaID, sharedstate.Record{Version: gen, Generation: gen, State: breaker.Closed,
			Fingerprint: opened.Fingerprint, Policy: opened.Policy})
		clock.Advance(2 * time.Second)
		p, err := a.Acquire(context.Background())
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		if got := errors.Is(err, breaker.ErrOpen); got != tc.repaired {
			t.Fatalf("closed record of generation %d (the opening's %d): Acquire = %v; want the open state written back: %v",
				gen, opened.Generation, err, tc.repaired)
		}
	}
}

// A half-open record written back carries the probe leases still live, not the ones
// that expired since this replica learned of them.
func TestRepairedHalfOpenRecordKeepsOnlyLiveLeases(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	a := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.HalfOpenMaxProbes = 2 })
	ctx := context.Background()
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	live := sharedstate.Lease{ID: 3, Owner: "b", Expires: clock.Now().Add(time.Hour).UnixNano()}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.Reason, r.Since = breaker.HalfOpen, r.Generation+1, breaker.ReasonBreakElapsed, clock.Now().UnixNano()
		r.Leases = []sharedstate.Lease{{ID: 5, Owner: "c", Expires: clock.Now().Add(time.Second).UnixNano()}, live}
	})
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // lease 5 has expired
	d.Forget()
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := d.Load(ctx, amnesiaID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != breaker.HalfOpen || len(r.Leases) != 1 || r.Leases[0] != live {
		t.Fatalf("record written back: %v with leases %+v; want half-open with the live lease %+v only", r.State, r.Leases, live)
	}
}

// Writing the known state back over a record created since is part of the read: a
// write the store takes makes the read succeed (and the repaired record the snapshot),
// one it refuses fails it.
func TestRepairOverANewRecordSucceedsOrFailsWithItsWrite(t *testing.T) {
	for _, refused := range []bool{false, true} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		a := ruleCircuit(t, d, clock, nil)
		clock.Advance(40 * time.Second)
		openAt(t, a)
		opened, err := d.Load(context.Background(), amnesiaID)
		if err != nil {
			t.Fatal(err)
		}
		d.Forget()
		created := uint64(clock.Now().Add(time.Second).UnixNano()) // by another replica, after the opening
		d.Set(amnesiaID, sharedstate.Record{Version: created, Generation: created, State: breaker.Closed,
			Fingerprint: opened.Fingerprint, Policy: opened.Policy})
		if refused {
			d.RefuseWrites(errOOM)
		}
		clock.Advance(2 * time.Second)
		err = a.Refresh(context.Background())
		if refused {
			if !errors.Is(err, errOOM) || !errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("Refresh whose repair the store refused: %v; want ErrUnavailable for %v", err, errOOM)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Refresh that repaired the record: %v", err)
		}
		if s := a.Snapshot(); s.State != breaker.Open || s.Generation <= created {
			t.Fatalf("snapshot after the repair %+v; want open with a generation past %d", s, created)
		}
	}
}
