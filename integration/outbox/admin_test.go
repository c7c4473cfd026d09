package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// admin is what the dead-row and retention tests use of a store.
type admin interface {
	outbox.Store
	outbox.Purger
	outbox.DeadLetters
}

// settleRows enqueues rows for dests and settles them: published for "published",
// dead with that reason otherwise, left pending for "". It returns their ids.
func settleRows(t *testing.T, sc storeCase, clock *fakeclock.Clock, rows []struct {
	dest transport.Destination
	end  string
}) []int64 {
	t.Helper()
	ctx := context.Background()
	s := sc.store
	entries := make([]outbox.Entry, len(rows))
	for i, r := range rows {
		entries[i] = outbox.Entry{Destination: r.dest, Message: transport.Message{Value: []byte(fmt.Sprint("row ", i))}}
	}
	ids := sc.enqueue(t, entries...)
	claimed, err := s.Claim(ctx, outbox.ClaimRequest{Token: "settle", Now: clock.Now(), Limit: len(rows), Lease: time.Minute})
	if err != nil || len(claimed) != len(rows) {
		t.Fatalf("Claim = %d rows, %v", len(claimed), err)
	}
	var published []int64
	var dead []outbox.Failure
	for i, r := range rows {
		switch r.end {
		case "published":
			published = append(published, ids[i])
		case "":
			// left leased; the Release below makes it pending again
		default:
			dead = append(dead, outbox.Failure{ID: ids[i], RetryAt: clock.Now(), Dead: true, Err: r.end})
		}
	}
	if n, err := s.MarkPublished(ctx, "settle", clock.Now(), published); n != len(published) || err != nil {
		t.Fatalf("MarkPublished = %d, %v", n, err)
	}
	if _, n, err := s.Fail(ctx, "settle", dead); n != len(dead) || err != nil {
		t.Fatalf("Fail = %d dead, %v", n, err)
	}
	if err := s.Release(ctx, "settle"); err != nil {
		t.Fatal(err)
	}
	return ids
}

// positions maps records to their index in ids.
func positions(recs []outbox.Record, ids []int64) []int {
	out := []int{}
	for _, r := range recs {
		out = append(out, slices.Index(ids, r.ID))
	}
	return out
}

func TestDeadRowsArePagedFilteredAndRequeued(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(admin)
		ids := settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, "published"}, {orders, "too large"}, {emails, "too large"},
			{emails, "bad key"}, {emails, ""}, {orders, outbox.ReasonDeferralExhausted},
		})

		for _, tc := range []struct {
			name   string
			filter outbox.DeadFilter
			page   outbox.Page
			want   []int
		}{
			{"every dead row", outbox.DeadFilter{}, outbox.Page{}, []int{1, 2, 3, 5}},
			{"first page", outbox.DeadFilter{}, outbox.Page{Limit: 2}, []int{1, 2}},
			{"next page", outbox.DeadFilter{}, outbox.Page{After: ids[2], Limit: 2}, []int{3, 5}},
			{"past the end", outbox.DeadFilter{}, outbox.Page{After: ids[5]}, []int{}},
			{"destination", outbox.DeadFilter{Destination: emails}, outbox.Page{}, []int{2, 3}},
			{"reason", outbox.DeadFilter{Reason: "too large"}, outbox.Page{}, []int{1, 2}},
			{"destination and reason", outbox.DeadFilter{Destination: emails, Reason: "too large"}, outbox.Page{}, []int{2}},
			{"ids, only dead ones", outbox.DeadFilter{IDs: []int64{ids[0], ids[3], ids[4], ids[5]}}, outbox.Page{}, []int{3, 5}},
		} {
			recs, err := s.DeadRows(ctx, tc.filter, tc.page)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := positions(recs, ids); !slices.Equal(got, tc.want) {
				t.Errorf("%s: rows %v, want %v", tc.name, got, tc.want)
			}
		}
		if _, err := s.DeadRows(ctx, outbox.DeadFilter{Destination: transport.Destination{Broker: "kafka"}}, outbox.Page{}); !errors.Is(err, transport.ErrInvalidDestination) {
			t.Errorf("DeadRows with an invalid destination = %v", err)
		}
		if _, err := s.DeadRows(ctx, outbox.DeadFilter{}, outbox.Page{Limit: -1}); err == nil {
			t.Error("DeadRows accepted a negative page limit")
		}

		if n, err := s.Requeue(ctx, outbox.DeadFilter{}, clock.Now()); n != 0 || !errors.Is(err, outbox.ErrEmptyFilter) {
			t.Errorf("Requeue(empty filter) = %d, %v; want ErrEmptyFilter", n, err)
		}
		clock.Advance(time.Minute)
		n, err := s.Requeue(ctx, outbox.DeadFilter{Destination: emails, Reason: "too large"}, clock.Now())
		if n != 1 || err != nil {
			t.Fatalf("Requeue(emails, too large) = %d, %v; want 1 row", n, err)
		}
		if r := sc.get(t, ids[2]); r.Status != outbox.StatusPending || !r.VisibleAfter.Equal(clock.Now()) || r.Attempts != 0 || r.Deferrals != 0 ||
			!r.FirstDeferredAt.IsZero() || !r.SettledAt.IsZero() || r.LeaseOwner != "" || r.LastError != "too large" {
			t.Errorf("requeued row: %+v; want pending, visible now, counts cleared, last error kept", r)
		}
		claimed, err := s.Claim(ctx, outbox.ClaimRequest{Token: "after", Now: clock.Now(), Limit: 10, Lease: time.Minute})
		if got := positions(claimed, ids); err != nil || !slices.Equal(got, []int{2, 4}) {
			t.Errorf("claim after requeue: rows %v, %v; want the requeued row and the pending one", got, err)
		}
		// By ids: only the dead ones among them change.
		if n, err := s.Requeue(ctx, outbox.DeadFilter{IDs: []int64{ids[0], ids[1], ids[5]}}, clock.Now()); n != 2 || err != nil {
			t.Errorf("Requeue(ids) = %d, %v; want the 2 dead rows among them", n, err)
		}
		if recs, _ := s.DeadRows(ctx, outbox.DeadFilter{}, outbox.Page{}); !slices.Equal(positions(recs, ids), []int{3}) {
			t.Errorf("dead rows left: %v, want [3]", positions(recs, ids))
		}
	})
}

func TestRetentionDeletesSettledRowsInBatches(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(admin)
		ids := settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, "published"}, {orders, "published"}, {emails, "published"},
			{emails, "too large"}, {orders, ""}, {emails, "bad key"},
		})
		r := outbox.Retention{Published: time.Hour, Dead: 3 * time.Hour, BatchSize: 2}
		left := func() []int {
			var out []int
			for _, r := range rowsOf(t, sc) {
				out = append(out, slices.Index(ids, r.ID))
			}
			return out
		}

		clock.Advance(time.Hour) // not older than an hour yet
		if n, err := outbox.Purge(ctx, s, r, clock.Now()); n != 0 || err != nil {
			t.Fatalf("Purge at the retention's edge = %d, %v; want nothing deleted", n, err)
		}
		clock.Advance(time.Second)
		// A batch deletes at most 2 rows of each status, the oldest first.
		if n, err := s.DeleteSettled(ctx, clock.Now().Add(-time.Hour), time.Time{}, 2); n != 2 || err != nil {
			t.Fatalf("DeleteSettled(limit 2) = %d, %v", n, err)
		}
		if got := left(); !slices.Equal(got, []int{2, 3, 4, 5}) {
			t.Fatalf("rows left after one batch: %v, want the two oldest published rows gone", got)
		}
		if n, err := outbox.Purge(ctx, s, r, clock.Now()); n != 1 || err != nil {
			t.Fatalf("Purge after an hour = %d, %v; want the last published row", n, err)
		}
		if got := left(); !slices.Equal(got, []int{3, 4, 5}) {
			t.Fatalf("rows left after an hour: %v, want the dead and the pending ones", got)
		}
		clock.Advance(2 * time.Hour)
		if n, err := outbox.Purge(ctx, s, r, clock.Now()); n != 2 || err != nil {
			t.Fatalf("Purge after three hours = %d, %v; want the two dead rows", n, err)
		}
		if got := left(); !slices.Equal(got, []int{4}) {
			t.Fatalf("rows left after three hours: %v, want only the pending one", got)
		}
		if pending, _, err := s.Backlog(ctx); pending != 1 || err != nil {
			t.Errorf("Backlog = %d, %v after purging; want the pending row", pending, err)
		}
	})
}

// rowsOf returns every row of the store, by id.
func rowsOf(t *testing.T, sc storeCase) []outbox.Record {
	t.Helper()
	if m, ok := sc.store.(*memory.Store); ok {
		return m.Records()
	}
	rows, err := sc.env.pool.Query(context.Background(), "SELECT id FROM "+postgres.Table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]outbox.Record, len(ids))
	for i, id := range ids {
		out[i] = sc.get(t, id)
	}
	return out
}
