package outbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// BacklogByDestination gives the same answer from PostgreSQL and from the memory
// store: per destination with pending rows, their number and the oldest one's age.
func TestBacklogByDestination(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	mem := outbox.NewMemoryStore(clock)
	ctx := context.Background()
	enqueue := func(d transport.Destination, n int) []int64 {
		entries := make([]outbox.Entry, n)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("v")}}
		}
		if _, err := mem.Enqueue(ctx, entries...); err != nil {
			t.Fatal(err)
		}
		return e.enqueue(t, d, n)
	}
	check := func(step string, want ...outbox.DestinationBacklog) {
		t.Helper()
		sorted := func(b []outbox.DestinationBacklog) []outbox.DestinationBacklog {
			slices.SortFunc(b, func(x, y outbox.DestinationBacklog) int {
				return strings.Compare(x.Destination.String(), y.Destination.String())
			})
			return b
		}
		want = sorted(want)
		pg, err := e.store.BacklogByDestination(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mem.BacklogByDestination(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pg, m = sorted(pg), sorted(m); !slices.Equal(pg, want) || !slices.Equal(m, want) {
			t.Errorf("%s: postgres %+v, memory %+v, want %+v", step, pg, m, want)
		}
	}
	check("empty")
	ids := enqueue(orders, 2)
	clock.Advance(time.Minute)
	enqueue(emails, 1)
	clock.Advance(time.Minute)
	check("two destinations",
		outbox.DestinationBacklog{Destination: orders, Pending: 2, Oldest: 2 * time.Minute},
		outbox.DestinationBacklog{Destination: emails, Pending: 1, Oldest: time.Minute})
	for _, s := range []outbox.Store{e.store, mem} {
		claimed, err := s.Claim(ctx, outbox.ClaimRequest{Token: "me", Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
		if err != nil {
			t.Fatal(err)
		}
		var published []int64
		for _, r := range claimed {
			if r.Destination == orders {
				published = append(published, r.ID)
			}
		}
		if len(published) != len(ids) {
			t.Fatalf("claimed %d rows of orders, want %d", len(published), len(ids))
		}
		if _, err := s.MarkPublished(ctx, "me", clock.Now(), published); err != nil {
			t.Fatal(err)
		}
	}
	check("orders published", outbox.DestinationBacklog{Destination: emails, Pending: 1, Oldest: time.Minute})
}
