package sharedstate_test

// What a read installs (circuit.go: load, Snapshot): the fresh record that replaces
// a tombstone, and the degraded state shown without a snapshot.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// The record that replaces a tombstone starts past both its version and its
// generation, even when they are ahead of the clock and apart, so that nothing from
// before the removal can match it.
func TestRecordAfterATombstoneStartsPastItsVersionAndGeneration(t *testing.T) {
	for name, edit := range map[string]func(*sharedstate.Record){
		"version ahead":    func(r *sharedstate.Record) { r.Version += 10 },
		"generation ahead": func(r *sharedstate.Record) { r.Generation += 10 },
	} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newCSHooked()
			c := csAged(t, d, clock, nil)
			tomb := sharedstate.Tombstone(uint64(clock.Now().Add(time.Hour).UnixNano()), clock.Now().UnixNano())
			edit(&tomb)
			d.Set(csID, tomb)
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := csStored(t, d); r.Version <= tomb.Version || r.Generation <= tomb.Generation {
				t.Fatalf("record after the tombstone %+v: %+v; want version and generation past its", tomb, r)
			}
		})
	}
}

// Snapshot without a snapshot (Forget dropped it) still shows that the store
// refuses this replica's writes.
func TestSnapshotWithoutAReadShowsTheRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCSHooked()
	c := csFresh(t, d, clock, nil)
	csTripped(t, d.counting, c)
	d.RefuseWrites(errOOM)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("tripped, opening refused: %v", err)
	}
	c.Forget()
	if s := c.Snapshot(); s.DegradedSince.IsZero() || s.State != breaker.Open {
		t.Fatalf("Snapshot after Forget while the store refuses writes: %+v; want degraded and open here", s)
	}
}
