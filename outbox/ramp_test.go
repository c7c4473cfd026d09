package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
)

// A circuit ramping up after recovery refuses some publishes with a ramp's
// *OpenError: the outbox takes it like an open circuit's rejection. Rows wait, no
// attempt is spent, and the backlog drains as the ramp admits.
func TestRampRefusalsSpendNoAttempts(t *testing.T) {
	const ramp = 2 * time.Second
	f := newFixture(t, registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute, RampDuration: ramp}},
		outbox.WithBatchSize(1), outbox.WithDeferralJitter(0))
	ids := f.enqueue(t, orders, 20)
	c, err := f.reg.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	b := c.(*breaker.Breaker)
	b.ForceOpen(t0.Add(time.Hour))
	b.ClearOverride()
	probe, err := b.Acquire(context.Background())
	if err != nil || !probe.Probe() || !probe.Complete(breaker.Success) {
		t.Fatalf("the probe did not close the circuit: %v", err)
	}
	if b.Snapshot().RampUntil.IsZero() {
		t.Fatal("the circuit is not ramping")
	}
	for step := 0; f.inner.callsTo(orders) < len(ids); step++ {
		if step > 200 {
			t.Fatalf("%d of %d rows published after %d steps", f.inner.callsTo(orders), len(ids), step)
		}
		f.process(t)
		for _, id := range ids {
			if r := f.get(t, id); r.Attempts != 0 {
				t.Fatalf("row %d spent an attempt on a ramp's refusal: %+v", id, r)
			}
		}
		f.clock.Advance(ramp / 40)
	}
	if refused := b.Snapshot().RampRefused; refused == 0 {
		t.Fatal("the ramp refused nothing; the test saw no refusal")
	}
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusPublished {
			t.Errorf("row %d: %+v, want published", id, r)
		}
	}
}
