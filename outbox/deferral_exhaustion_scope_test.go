package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// A Hold past MaxDeferral makes dead only the held destination's pending rows: not
// another destination's rows, however old, nor rows already published.
func TestDeferralExhaustionTakesOnlyTheHeldDestinationsPendingRows(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	var entries []outbox.Entry
	for _, d := range []transport.Destination{emails, orders, orders} { // the second row is published
		entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Value: []byte(d.Name)}})
	}
	ctx := context.Background()
	ids, err := s.Enqueue(ctx, entries...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, outbox.ClaimRequest{Token: "c", Now: t0, Limit: 10, Lease: time.Minute, ProbeLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MarkPublished(ctx, "c", t0, ids[1:2]); n != 1 || err != nil {
		t.Fatalf("MarkPublished = %d, %v", n, err)
	}
	if err := s.Release(ctx, "c"); err != nil { // the pending rows, unleased
		t.Fatal(err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "c", Now: t0, Until: t0.Add(time.Minute), MaxDeferral: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(10 * time.Minute)
	clock.Set(later)
	dead, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "other", Now: later, Until: later.Add(time.Minute), MaxDeferral: 5 * time.Minute})
	if dead != 1 || err != nil {
		t.Errorf("Hold past MaxDeferral = %d dead, %v; want 1 (orders' pending row)", dead, err)
	}
	for i, want := range []outbox.Status{outbox.StatusPending, outbox.StatusPublished, outbox.StatusDead} {
		if r, _ := s.Get(ids[i]); r.Status != want {
			t.Errorf("row %d (%s): %s, want %s", i, r.Destination.Name, r.Status, want)
		}
	}
}
