package sharedstate_test

// A replica open on its own evidence (degraded.go: acquireDegraded) rejects without
// I/O for its whole local break, however old its snapshot of the shared record.

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// Opened locally (three refused failures, a one-minute break), with a snapshot far
// past three quarters of MaxStaleness: calls are rejected until the local break ends,
// and the record is not read for them.
func TestLocallyOpenRejectsWithoutReadingAnOldSnapshot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Second })
	esRefusedFailure(t, c, d) // reads the record, then the store refuses the failure
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure) // the third opens here
	opened := clock.Now()
	for _, after := range []time.Duration{10 * time.Second, 59 * time.Second} {
		clock.Set(opened.Add(after))
		loads := d.count("load")
		if nb := esOpenUntil(t, c, "locally open"); !nb.Equal(opened.Add(time.Minute)) {
			t.Fatalf("%v into the local break: rejected until %v; want the local break's end %v", after, nb, opened.Add(time.Minute))
		}
		if n := d.count("load") - loads; n != 0 {
			t.Fatalf("%v into the local break, snapshot as old: %d reads for a rejected call; want none", after, n)
		}
	}
}
