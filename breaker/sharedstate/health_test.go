package sharedstate_test

// Which openings carry this replica's last failure text (health.go: noteOpening): an
// opening by failures, for a failure of the generation it ends, from that
// generation's first instant on; never an operator's ForceOpen.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A ForceOpen opens by an operator's hand, not by failures: the record it writes
// does not carry the failure text of a call that failed before it.
func TestForceOpenCarriesNoFailureText(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	mustAcquire(t, c).CompleteWith(breaker.Failure, errors.New("broker said no")) // one of three
	clock.Advance(time.Second)
	if err := c.ForceOpen(context.Background(), clock.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r := storedRecord(t, d.MemoryDriver); r.State != breaker.Open || r.LastError != "" || r.LastErrorAt != 0 {
		t.Fatalf("record after ForceOpen: %v, LastError %q at %d; want open with no failure text", r.State, r.LastError, r.LastErrorAt)
	}
}

// A failure at the very instant its generation began (here a ForceClose cleared)
// belongs to that generation: the opening it causes carries its text.
func TestFailureAtItsGenerationsStartIsNoted(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.FailureThreshold = 1 })
	ctx := context.Background()
	if err := c.ForceClose(ctx, clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if err := c.ClearOverride(ctx); err != nil { // closed, Since now
		t.Fatal(err)
	}
	if r := storedRecord(t, d.MemoryDriver); r.Since != clock.Now().UnixNano() {
		t.Fatalf("cleared ForceClose: Since %d; want now, %d", r.Since, clock.Now().UnixNano())
	}
	mustAcquire(t, c).CompleteWith(breaker.Failure, errors.New("broker said no")) // the same instant: opens
	r := storedRecord(t, d.MemoryDriver)
	if r.State != breaker.Open || r.LastError != "broker said no" || r.LastErrorAt != clock.Now().UnixNano() {
		t.Fatalf("record opened by a failure at its generation's start: %v, LastError %q at %d; want open with the failure's text at %d",
			r.State, r.LastError, r.LastErrorAt, clock.Now().UnixNano())
	}
}

// A replica shows its own last failure with its error while the circuit stays closed
// (the record holds it only once it opens), and its own over the record's only when newer.
func TestSnapshotShowsTheReplicasOwnLastFailure(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	p := esAcquire(t, c)
	p.CompleteWith(breaker.Failure, errors.New("broker said no"))
	s := c.Snapshot()
	if s.LastError != "broker said no" || !s.LastErrorAt.Equal(clock.Now()) {
		t.Fatalf("after a failure with its error: %q at %v; want it at %v", s.LastError, s.LastErrorAt, clock.Now())
	}
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { // another replica's, at the same instant
		r.LastError, r.LastErrorAt = "another replica's", clock.Now().UnixNano()
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Snapshot(); s.LastError != "another replica's" {
		t.Fatalf("with an error in the record as recent as ours: %q; want the record's", s.LastError)
	}
	clock.Advance(time.Second)
	esAcquire(t, c).CompleteWith(breaker.Failure, errors.New("again"))
	if s := c.Snapshot(); s.LastError != "again" || !s.LastErrorAt.Equal(clock.Now()) {
		t.Fatalf("after a newer failure here: %q at %v; want \"again\" at %v", s.LastError, s.LastErrorAt, clock.Now())
	}
}
