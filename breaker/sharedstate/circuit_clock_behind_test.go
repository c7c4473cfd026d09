package sharedstate_test

// Snapshot ages are differences of two readings of the circuit's clock (circuit.go),
// whatever those readings are: an injected clock set back to before the circuit was
// made gives negative readings, and the soft refresh's staleness bound holds all the
// same.

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// The soft refresh fails after the snapshot has turned MaxStaleness old: the call is
// not admitted on it, though the snapshot was read an hour before the circuit's
// creation by its clock (the boundary of TestSoftRefreshEndingAtMaxStalenessDoesNotAdmit).
func TestSoftRefreshBoundOnAClockBehindTheCircuitsCreation(t *testing.T) {
	for _, tc := range []struct {
		read  time.Duration
		admit bool
	}{{200*time.Millisecond - 1, true}, {200 * time.Millisecond, false}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = -1 })
		clock.Advance(-time.Hour)
		if err := c.Refresh(context.Background()); err != nil { // read at -1h
			t.Fatal(err)
		}
		clock.Advance(800 * time.Millisecond)
		d.onLoad = func() {
			clock.Advance(tc.read)
			d.Down(errDown)
		}
		if ok, err := csAdmitted(c); ok != tc.admit {
			t.Fatalf("soft refresh failing after %v, clock behind the circuit's creation: admitted %v (%v); want %v", tc.read, ok, err, tc.admit)
		}
	}
}
