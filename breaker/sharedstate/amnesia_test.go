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
