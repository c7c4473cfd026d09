package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// Shadow and FailOpen destinations keep flowing while their circuit is open: the
// outbox publishes their rows instead of deferring them; Enforce defers.
func TestRolloutModesArePublishedNotDeferred(t *testing.T) {
	for _, tc := range []struct {
		mode          breaker.Mode
		wantPublished bool
	}{{breaker.Enforce, false}, {breaker.Shadow, true}, {breaker.FailOpen, true}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := newFixture(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, Mode: tc.mode})
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
			rep := f.process(t)
			got := rep.ByDestination[orders]
			if tc.wantPublished {
				if got.Published != 2 || got.Deferred != 0 || f.inner.callsTo(orders) != 2 {
					t.Fatalf("report %+v after %d calls; want 2 published through the open circuit", got, f.inner.callsTo(orders))
				}
				for _, id := range ids {
					if r := f.get(t, id); r.Status != outbox.StatusPublished {
						t.Fatalf("row %d is %s", id, r.Status)
					}
				}
				return
			}
			if got.Deferred != 2 || f.inner.callsTo(orders) != 1 {
				t.Fatalf("report %+v after %d calls; want 2 deferred and no new call", got, f.inner.callsTo(orders))
			}
		})
	}
}
