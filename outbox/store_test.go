package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

func TestMemoryEnqueueRejectsInvalidDestinations(t *testing.T) {
	s := memory.New(nil)
	_, err := s.Enqueue(context.Background(),
		outbox.Entry{Destination: orders},
		outbox.Entry{Destination: transport.Destination{Broker: "Kafka", Name: "x"}})
	if !errors.Is(err, transport.ErrInvalidDestination) {
		t.Fatalf("Enqueue = %v, want ErrInvalidDestination", err)
	}
	if len(s.Records()) != 0 {
		t.Error("a failed Enqueue added rows")
	}
}

// A deferral gives the listed rows back uncharged and leaves visible_after alone;
// another claim's deferral changes nothing.
func TestMemoryDeferTouchesOnlyTheClaimsListedRows(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	ctx := context.Background()
	ids, _ := s.Enqueue(ctx, outbox.Entry{Destination: orders}, outbox.Entry{Destination: orders})
	if _, err := s.Claim(ctx, outbox.ClaimRequest{Token: "me", Now: t0, Limit: 10, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Defer(ctx, outbox.Deferral{Token: "me", IDs: ids[:1], Now: t0}); err != nil || n != 1 {
		t.Fatalf("Defer = %d, %v; want 1", n, err)
	}
	if r, _ := s.Get(ids[0]); !r.VisibleAfter.Equal(t0) || r.Deferrals != 1 || r.LeaseOwner != "" {
		t.Errorf("deferred row %+v; want visible_after untouched, one deferral, released", r)
	}
	if r, _ := s.Get(ids[1]); r.Deferrals != 0 || r.LeaseOwner != "me" {
		t.Errorf("an unlisted row changed: %+v", r)
	}
	if n, _ := s.Defer(ctx, outbox.Deferral{Token: "other", IDs: ids, Now: t0}); n != 0 {
		t.Errorf("a deferral by another claim changed %d rows", n)
	}
}

func TestMemoryBacklog(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	ctx := context.Background()
	if n, age, err := s.Backlog(ctx); n != 0 || age != 0 || err != nil {
		t.Fatalf("empty Backlog = %d, %v, %v", n, age, err)
	}
	ids, _ := s.Enqueue(ctx, outbox.Entry{Destination: orders})
	clock.Advance(time.Minute)
	s.Enqueue(ctx, outbox.Entry{Destination: orders})
	clock.Advance(time.Minute)
	if n, age, _ := s.Backlog(ctx); n != 2 || age != 2*time.Minute {
		t.Errorf("Backlog = %d, %v; want 2 rows, oldest 2m", n, age)
	}
	s.Claim(ctx, outbox.ClaimRequest{Token: "me", Now: clock.Now(), Limit: 1, Lease: time.Minute})
	s.MarkPublished(ctx, "me", clock.Now(), ids)
	if n, age, _ := s.Backlog(ctx); n != 1 || age != time.Minute {
		t.Errorf("Backlog = %d, %v; want 1 row, oldest 1m", n, age)
	}
}

// A claim takes the lowest ids first, skipping rows not yet visible, and a row waits
// while an earlier row of its key does.
func TestMemoryClaimKeepsKeyOrder(t *testing.T) {
	clock := fakeclock.New(t0)
	s := memory.New(clock)
	ctx := context.Background()
	k := func(key string) outbox.Entry {
		return outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte(key)}}
	}
	ids, _ := s.Enqueue(ctx, k("a"), k("a"), k("b"), outbox.Entry{Destination: orders})
	s.Claim(ctx, outbox.ClaimRequest{Token: "me", Now: t0, Limit: 1, Lease: time.Minute})
	s.Fail(ctx, "me", []outbox.Failure{{ID: ids[0], RetryAt: t0.Add(time.Second), Err: "x"}})
	got, _ := s.Claim(ctx, outbox.ClaimRequest{Token: "me2", Now: t0, Limit: 10, Lease: time.Minute})
	if len(got) != 2 || got[0].ID != ids[2] || got[1].ID != ids[3] {
		t.Fatalf("claimed %+v; want rows %d and %d (row %d waits behind row %d of its key)", got, ids[2], ids[3], ids[1], ids[0])
	}
	if got[0].LeaseOwner != "me2" || !got[0].LeaseUntil.Equal(t0.Add(time.Minute)) {
		t.Errorf("lease %q until %v", got[0].LeaseOwner, got[0].LeaseUntil)
	}
	got, _ = s.Claim(ctx, outbox.ClaimRequest{Token: "me3", Now: t0.Add(time.Second), Limit: 10, Lease: time.Minute})
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Fatalf("claimed %+v; want rows %d and %d in order", got, ids[0], ids[1])
	}
}
