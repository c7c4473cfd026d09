package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Shadow and FailOpen destinations keep flowing while their circuit is open: the
// outbox publishes their rows instead of holding them; Enforce holds.
func TestRolloutModesArePublishedNotDeferred(t *testing.T) {
	for _, tc := range []struct {
		mode          breaker.Mode
		wantPublished bool
	}{{breaker.Enforce, false}, {breaker.Shadow, true}, {breaker.FailOpen, true}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, Mode: tc.mode}})
			failing := true
			f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
				if failing {
					return errBroker
				}
				return nil
			}
			f.enqueue(t, orders, 1)
			f.process(t) // fails: the circuit opens
			if s := f.reg.Snapshots()[orders]; s.State != breaker.Open {
				t.Fatalf("circuit %v, want open", s.State)
			}
			failing = false
			ids := f.enqueue(t, orders, 2)
			// An outage holds the destination for the rejected delay (Shadow, FailOpen)
			// or until the circuit's deadline (Enforce).
			f.clock.Advance(outbox.DefaultRejectedDelay + 10*time.Second) // and the jitter
			var got outbox.Counts
			claimed := 0
			for range 2 {
				rep := f.process(t)
				got.Published += rep.ByDestination[orders].Published
				claimed += rep.Claimed
			}
			if tc.wantPublished {
				if got.Published != 3 || f.inner.callsTo(orders) != 3 {
					t.Fatalf("published %d after %d calls; want all 3 through the open circuit (probe, then the rest)", got.Published, f.inner.callsTo(orders))
				}
				for _, id := range ids {
					if r := f.get(t, id); r.Status != outbox.StatusPublished {
						t.Fatalf("row %d is %s", id, r.Status)
					}
				}
				return
			}
			if claimed != 0 || f.inner.callsTo(orders) != 1 {
				t.Fatalf("claimed %d after %d calls; want the destination held and no new call", claimed, f.inner.callsTo(orders))
			}
		})
	}
}
