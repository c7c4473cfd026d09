package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/registry"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// A probe is not bulk work to pace: the probe row of a destination whose hold ended
// is sent even when calls in flight fill its limit and leave no bulk headroom (the
// circuit admits a probe past the limit too). Paced, it would wait for headroom that
// the outage's own calls hold.
func TestProbeIsSentWithoutBulkHeadroom(t *testing.T) {
	p := limitedPolicy
	p.Circuit.FailureThreshold = 1
	p.Admission.Limit = admission.LimitPolicy{Max: 2, BulkShare: 0.5}
	f := newFixture(t, p)
	c, err := f.reg.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	var held []registry.Permit
	for range 3 {
		pm, err := f.reg.Acquire(context.Background(), orders)
		if err != nil {
			break
		}
		held = append(held, pm)
	}
	if len(held) < 2 {
		t.Fatalf("acquired %d permits, want the limit's 2", len(held))
	}
	c.(*breaker.Breaker).ForceOpen(f.clock.Now().Add(p.Circuit.BreakDuration)) // the permits stay in flight
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("circuit %v, want open", s.State)
	}
	sent := 0
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { sent++; return nil }
	id := f.enqueue(t, orders, 1)[0]
	f.process(t) // refused by the open circuit: orders is held
	if _, held := f.store.HeldUntil(orders); !held || sent != 0 {
		t.Fatalf("after the refusal: held %v, %d publishes; want held, none", held, sent)
	}
	f.clock.Advance(time.Hour) // past the break and the hold: the next claim is a probe
	if l, _ := f.reg.Admission(orders); l.BulkHeadroom() != 0 {
		t.Fatalf("bulk headroom %d, want none", l.BulkHeadroom())
	}
	rep := f.process(t)
	if sent != 1 || rep.ByDestination[orders].Published != 1 || f.get(t, id).Status != outbox.StatusPublished {
		t.Fatalf("probe: %d publishes, counts %+v; want the probe row sent and published", sent, rep.ByDestination[orders])
	}
	for _, pm := range held {
		f.reg.Complete(orders, pm, breaker.Neutral)
	}
}
