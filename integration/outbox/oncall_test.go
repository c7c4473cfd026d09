package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// TestOnCallReadingsMatchOnBothStores checks the holds and the dead rows by reason
// that an admin API reads, and that each reason counted picks its rows to page and
// requeue.
func TestOnCallReadingsMatchOnBothStores(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(interface {
			admin
			outbox.OnCall
		})
		settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, outbox.ReasonAttemptsExhausted + ": too large"},
			{orders, outbox.ReasonAttemptsExhausted + ": bad key"},
			{emails, outbox.ReasonDeferralExhausted},
			{emails, outbox.ReasonUndecodable + ": headers: not JSON"}, // the reason ends at the first ": "
			{emails, "attempts_exhaustedness"},                         // shares the prefix, not the reason
			{emails, "custom:detail"},                                  // no ": ", so all of it is the reason
			{emails, ""},
		})
		counts, err := s.DeadCounts(ctx)
		if got, want := fmt.Sprint(counts, err), "[{attempts_exhausted 2} {attempts_exhaustedness 1} {circuit_deferral_exhausted 1} {custom:detail 1} {undecodable 1}] <nil>"; got != want {
			t.Errorf("DeadCounts = %s, want %s", got, want)
		}
		// Each reason counted picks its rows, so that a person can requeue what they see.
		for _, c := range counts {
			recs, err := s.DeadRows(ctx, outbox.DeadFilter{Reason: c.Reason}, outbox.Page{})
			if int64(len(recs)) != c.Rows || err != nil {
				t.Errorf("DeadRows(reason %q) = %d rows, %v; counted %d", c.Reason, len(recs), err, c.Rows)
			}
		}

		if hs, err := s.Holds(ctx); len(hs) != 0 || err != nil {
			t.Errorf("Holds before any = %v, %v", hs, err)
		}
		now := clock.Now()
		for _, h := range []outbox.Hold{
			{Destination: orders, Now: now, Until: now.Add(30 * time.Second), MaxDeferral: time.Hour},
			{Destination: emails, Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour, Reason: "403 ACCESS_REFUSED"},
		} {
			if _, err := s.Hold(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		hs, err := s.Holds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, fmt.Sprintf("%s until +%s since +%s unusable %q", h.Destination, h.Until.Sub(now), h.Since.Sub(now), h.Unusable))
		}
		if want := `[kafka:emails until +1m0s since +0s unusable "403 ACCESS_REFUSED" kafka:orders until +30s since +0s unusable ""]`; fmt.Sprint(got) != want {
			t.Errorf("Holds = %v, want %s", got, want)
		}
		// The last hold's reason wins: an outage hold of an unusable destination says so.
		if _, err := s.Hold(ctx, outbox.Hold{Destination: emails, Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if hs, err := s.Holds(ctx); err != nil || hs[0].Destination != emails || hs[0].Unusable != "" {
			t.Errorf("after an outage hold: %+v, %v", hs, err)
		}
	})
}

// BacklogByDestination gives the same answer from PostgreSQL and from the memory
// store: per destination with pending rows, their number and the oldest one's age.
func TestBacklogByDestination(t *testing.T) {
	clock := fakeclock.New(start())
	e := newEnv(t, clock)
	mem := memory.New(clock)
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
